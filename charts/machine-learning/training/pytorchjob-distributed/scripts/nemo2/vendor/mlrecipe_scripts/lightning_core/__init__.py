"""What the Lightning-based scripts share (``pytorch_lightning`` and ``nemo2``): flags from dataclasses, SFT data."""
