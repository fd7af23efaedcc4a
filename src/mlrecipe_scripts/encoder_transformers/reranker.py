"""Cross-encoder reranking (Triton python backend): ``query`` STRING [1] and ``texts`` STRING [-1] -> ``scores``
FP32 [-1], one score per text, every text scored (in chunks of the largest batch bucket, or of 32 off XLA).

A score is the raw logit when the model has one label, else the softmax probability of the last label. With
``max_batch_size`` > 0 a request's tensors carry a batch dimension: ``query`` [b, 1], ``texts`` [b, N] ->
``scores`` [b, N] (row i: query i against its N texts); without, ``query`` [1], ``texts`` [N] -> ``scores``
[N]. See encoder_base.py for the repository layout and model.json.
"""

from __future__ import annotations

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForSequenceClassification

from .encoder_base import EncoderBaseModel, RequestError, decode_strings

CPU_CHUNK = 32


class TritonPythonModel(EncoderBaseModel):
    auto_class = AutoModelForSequenceClassification
    inputs = [{"name": "query", "data_type": "TYPE_STRING", "dims": [1]},
              {"name": "texts", "data_type": "TYPE_STRING", "dims": [-1]}]
    outputs = [{"name": "scores", "data_type": "TYPE_FP32", "dims": [-1]}]

    def setup(self) -> None:
        self.chunk = self.bucket_batch_size[-1] if self.xla else CPU_CHUNK

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        scores = []
        for start in range(0, len(texts), self.chunk):
            part = texts[start:start + self.chunk]
            encoded = self.tokenize([query] * len(part), part)
            logits = self.model(**encoded).logits[: len(part)].float()
            if logits.shape[-1] == 1:
                scores.append(logits[:, 0])
            else:
                scores.append(torch.softmax(logits, dim=-1)[:, -1])
        return torch.cat(scores).cpu().numpy() if scores else np.zeros((0,), dtype=np.float32)

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse]:
        responses: list[pb_utils.InferenceResponse] = []
        for request in requests:
            try:
                queries, _ = decode_strings(request, "query")
                texts, texts_shape = decode_strings(request, "texts")
                if not queries:
                    raise RequestError("input 'query' is empty")
                batched = self.max_batch_size > 0 and len(texts_shape) == 2
                rows = texts_shape[0] if batched else 1
                if batched and len(queries) != rows:
                    raise RequestError(f"'query' has {len(queries)} row(s) but 'texts' has {rows}")
                width = len(texts) // rows if rows else 0
                with torch.inference_mode():
                    scores = np.stack([self.score(queries[r], texts[r * width:(r + 1) * width]) for r in range(rows)])
                out = scores if batched else scores.reshape(-1)
                responses.append(pb_utils.InferenceResponse(output_tensors=[self.output("scores", out)]))
            except RequestError as exc:
                responses.append(self.error(str(exc)))
            except Exception as exc:  # this request fails, the server stays up
                responses.append(self.error(f"inference failed: {type(exc).__name__}: {exc}", bad_request=False))
        return responses
