"""Masked language modelling (Triton python backend): ``text_input`` STRING [1] -> ``logits`` [B, S, V].

S is the longest sequence of each request (its own padding, not the batch's). See encoder_base.py.
"""

from __future__ import annotations

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForMaskedLM

from .encoder_base import EncoderBaseModel


class TritonPythonModel(EncoderBaseModel):
    auto_class = AutoModelForMaskedLM
    outputs = [{"name": "logits", "data_type": "TYPE_FP32", "dims": [-1, -1]}]

    def forward(self, encoded: dict[str, torch.Tensor], rows: int) -> dict[str, np.ndarray]:
        return {"logits": self.model(**encoded).logits[:rows].float().cpu().numpy()}

    def outputs_for(self, results: dict[str, np.ndarray], start: int, end: int, mask: torch.Tensor,
                    shape: tuple[int, ...]) -> list[pb_utils.Tensor]:
        return self.per_token(results, start, end, mask)
