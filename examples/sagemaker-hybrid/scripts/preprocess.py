"""The one preprocessing function that training and serving share: 8x8 digits -> CIFAR-shaped tensors.

scikit-learn's digits are 8x8 grey images with values 0..16. Training (``train.py``) and the endpoint's handler
(``inference.py``, packed into ``model.tar.gz`` beside this file) both call :func:`to_model_input`, so what the
model sees when it is served is what it saw when it was trained.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

SIDE = 32
CHANNELS = 3
#: Mean and standard deviation of the digits' pixels after scaling to [0, 1] (fixed: no data-dependent state).
MEAN, STD = 0.30, 0.38


def to_model_input(images: np.ndarray | list) -> torch.Tensor:
    """Raw digits ``[N, 8, 8]`` (or ``[N, 64]``), values 0..16 -> a float tensor ``[N, 3, 32, 32]``, normalized."""
    pixels = torch.as_tensor(np.asarray(images, dtype=np.float32)).reshape(-1, 1, 8, 8) / 16.0
    upsampled = F.interpolate(pixels, size=(SIDE, SIDE), mode="bilinear", align_corners=False)
    return ((upsampled - MEAN) / STD).expand(-1, CHANNELS, -1, -1).contiguous()
