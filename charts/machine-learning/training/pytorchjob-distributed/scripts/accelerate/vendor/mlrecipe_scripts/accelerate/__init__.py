"""``framework: accelerate``: HF Trainer / Accelerator scripts run by ``accelerate launch`` (chart
training/pytorchjob-distributed)."""
