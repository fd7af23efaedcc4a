"""Sequence classification (Triton python backend): ``text_input`` STRING [1] -> ``logits`` [B, num_labels].

See encoder_base.py for the repository layout and model.json.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification

from .encoder_base import EncoderBaseModel


class TritonPythonModel(EncoderBaseModel):
    auto_class = AutoModelForSequenceClassification
    outputs = [{"name": "logits", "data_type": "TYPE_FP32", "dims": [-1]}]

    def forward(self, encoded: dict[str, torch.Tensor], rows: int) -> dict[str, np.ndarray]:
        return {"logits": self.model(**encoded).logits[:rows].float().cpu().numpy()}
