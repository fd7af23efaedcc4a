"""``framework: ray_train``: HF Trainer scripts inside Ray Train's ``TorchTrainer`` (chart training/raytrain)."""
