"""Sentence embeddings (Triton python backend): ``text_input`` STRING [1] -> ``embeddings`` [B, H].

``model.json`` adds ``pooling_strategy`` ("mean" over the attention mask, default, or "cls": the first token)
and ``normalize`` (L2, default true). See encoder_base.py for the repository layout and the other keys.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModel

from .encoder_base import EncoderBaseModel


class TritonPythonModel(EncoderBaseModel):
    auto_class = AutoModel
    outputs = [{"name": "embeddings", "data_type": "TYPE_FP32", "dims": [-1]}]

    def setup(self) -> None:
        self.pooling = self.settings.get("pooling_strategy", "mean")
        if self.pooling not in ("mean", "cls"):
            raise ValueError(f"model.json: pooling_strategy must be 'mean' or 'cls', got {self.pooling!r}")
        self.normalize = bool(self.settings.get("normalize", True))

    def forward(self, encoded: dict[str, torch.Tensor], rows: int) -> dict[str, np.ndarray]:
        hidden = self.model(**encoded).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
        return {"embeddings": pooled[:rows].float().cpu().numpy()}
