"""A small CIFAR-style CNN (two conv blocks, two dense layers) for 3x32x32 inputs and 10 classes."""

from __future__ import annotations

from torch import nn


def build_model(classes: int = 10) -> nn.Module:
    """The network ``train.py`` trains and ``inference.py`` serves."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, classes),
    )
