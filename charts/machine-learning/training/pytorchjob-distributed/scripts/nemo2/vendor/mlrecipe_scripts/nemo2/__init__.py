"""``framework: nemo2``: NeMo 2 fine-tuning through nemo_run, conversion and evaluation (chart
training/pytorchjob-distributed)."""
