"""``framework: pytorch_lightning``: Lightning + FSDP + PEFT fine-tuning (chart training/pytorchjob-distributed)."""
