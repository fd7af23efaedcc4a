"""Token classification (Triton python backend): ``text_input`` STRING [1] -> ``predictions`` [B, S] (argmax
label ids) and/or ``logits`` [B, S, num_labels], whichever config.pbtxt declares (at least one).

S is the longest sequence of each request. See encoder_base.py.
"""

from __future__ import annotations

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForTokenClassification

from .encoder_base import EncoderBaseModel

OUTPUTS = ("predictions", "logits")


class TritonPythonModel(EncoderBaseModel):
    auto_class = AutoModelForTokenClassification
    outputs = [{"name": "predictions", "data_type": "TYPE_INT64", "dims": [-1]},
               {"name": "logits", "data_type": "TYPE_FP32", "dims": [-1, -1]}]

    def setup(self) -> None:
        self.wanted = [name for name in OUTPUTS if name in self.output_dtypes]
        if not self.wanted:
            raise ValueError("config.pbtxt must declare the output 'predictions', 'logits' or both")

    def forward(self, encoded: dict[str, torch.Tensor], rows: int) -> dict[str, np.ndarray]:
        logits = self.model(**encoded).logits[:rows].float()
        results = {"predictions": logits.argmax(dim=-1).cpu().numpy(), "logits": logits.cpu().numpy()}
        return {name: results[name] for name in self.wanted}

    def outputs_for(self, results: dict[str, np.ndarray], start: int, end: int, mask: torch.Tensor,
                    shape: tuple[int, ...]) -> list[pb_utils.Tensor]:
        return self.per_token(results, start, end, mask)
