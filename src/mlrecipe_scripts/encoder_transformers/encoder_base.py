"""Shared base of the Triton python-backend encoder models (``framework: encoder_transformers``).

A recipe's pre_script builds a model repository::

    <repo>/<model>/config.pbtxt        the Triton model configuration (backend: "python")
    <repo>/<model>/1/model.py          one task file of this folder (embeddings.py, masked_lm.py, reranker.py,
                                       sequence_classification.py, token_classification.py)
    <repo>/<model>/1/encoder_base.py   this file (Triton puts the version directory on sys.path)
    <repo>/<model>/1/model.json        {"model_id_or_path": DIR, "bucket_batch_size": [...], "bucket_seq_len": [...]}

``model.json`` (next to model.py) names the model and its tokenizer (``model_id_or_path``). The batch and
sequence buckets matter only on XLA devices (``torch_xla`` importable: AWS Neuron), where every input is padded
to a bucket so the compiled graphs are reused; elsewhere inputs are padded to the longest in the batch and
truncated at 128 tokens. Device: XLA, else ``cuda:$LOCAL_RANK``, else CPU. ``"torch_compile": true`` wraps the
model in ``torch.compile`` (off by default: on CPU it needs a C compiler and compiles slowly).

Requests of one dynamic batch are run as one model batch and split back; a request that cannot be served
(an input that is not UTF-8, a missing tensor) gets its own error response, the others their results. Output
dtypes come from config.pbtxt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer

DEFAULT_BUCKET_BATCH_SIZE = [1, 2, 4, 8]
DEFAULT_BUCKET_SEQ_LEN = [32, 64, 128]
CPU_MAX_SEQ_LEN = 128


class RequestError(ValueError):
    """A request this model cannot serve; it becomes that request's TritonError."""


def _xla() -> ModuleType | None:
    try:
        import torch_xla.core.xla_model as xm  # present on Neuron / XLA images only
    except ImportError:
        return None
    return xm


def decode_strings(request: pb_utils.InferenceRequest, name: str) -> tuple[list[str], tuple[int, ...]]:
    """The strings of a BYTES input (flattened, UTF-8) and the tensor's shape."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        raise RequestError(f"input '{name}' is missing")
    array = tensor.as_numpy()
    texts = []
    for item in array.reshape(-1):
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RequestError(f"input '{name}' is not UTF-8 text: {exc}") from None
        texts.append(str(item))
    return texts, tuple(array.shape)


class EncoderBaseModel:
    """Loads ``model.json``'s model and tokenizer; subclasses name the model class and the task's outputs."""

    #: The transformers auto class of the task (``AutoModel``, ``AutoModelForMaskedLM`` ...).
    auto_class: ClassVar[type[Any] | None] = None
    #: For ``auto_complete_config``: the task's inputs and outputs as Triton config entries.
    inputs: ClassVar[list[dict[str, Any]]] = [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}]
    outputs: ClassVar[list[dict[str, Any]]] = []

    @classmethod
    def auto_complete_config(cls, auto_complete_model_config: Any) -> Any:
        """Fill inputs, outputs and batching when config.pbtxt leaves them out (recipes disable auto-complete)."""
        config = auto_complete_model_config.as_dict()
        if not config.get("input"):
            for entry in cls.inputs:
                auto_complete_model_config.add_input(entry)
        if not config.get("output"):
            for entry in cls.outputs:
                auto_complete_model_config.add_output(entry)
        if not config.get("max_batch_size"):
            auto_complete_model_config.set_max_batch_size(8)
        return auto_complete_model_config

    def initialize(self, args: dict[str, str]) -> None:
        self.model_config = json.loads(args["model_config"])
        version_dir = Path(args.get("model_repository", "")) / str(args.get("model_version", ""))
        if not (version_dir / "model.json").is_file():
            version_dir = Path(__file__).resolve().parent
        settings: dict[str, Any] = json.loads((version_dir / "model.json").read_text(encoding="utf-8"))
        if not settings.get("model_id_or_path"):
            raise pb_utils.TritonModelException(f"{version_dir / 'model.json'}: 'model_id_or_path' is required")
        self.settings = settings
        self.max_batch_size = int(self.model_config.get("max_batch_size", 0))
        xm = _xla()
        if xm is not None:
            self.device = xm.xla_device()
            self.bucket_batch_size = sorted(settings.get("bucket_batch_size", DEFAULT_BUCKET_BATCH_SIZE))
            self.bucket_seq_len = sorted(settings.get("bucket_seq_len", DEFAULT_BUCKET_SEQ_LEN))
        else:
            self.device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
                                       if torch.cuda.is_available() else "cpu")
            self.bucket_batch_size, self.bucket_seq_len = [1], [CPU_MAX_SEQ_LEN]
        self.xla = xm is not None
        self.max_seq_len = self.bucket_seq_len[-1]
        path = settings["model_id_or_path"]
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        model = self.load_model(path).eval().to(self.device)
        self.model = torch.compile(model) if settings.get("torch_compile") else model
        self.output_dtypes = {
            out["name"]: pb_utils.triton_string_to_numpy(out["data_type"])
            for out in self.model_config.get("output", [])
        }
        self.setup()

    def load_model(self, path: str) -> torch.nn.Module:
        if self.auto_class is None:
            raise NotImplementedError(f"{type(self).__name__} names no auto_class")
        return self.auto_class.from_pretrained(path)

    def setup(self) -> None:
        """Task-specific checks and settings, after the model is loaded."""

    def finalize(self) -> None:
        del self.model

    # -- helpers for subclasses -------------------------------------------------------------------------------

    def pad_to_bucket(self, length: int, buckets: list[int]) -> int:
        return next((b for b in buckets if b >= length), buckets[-1])

    def tokenize(self, *texts: list[str]) -> dict[str, torch.Tensor]:
        """Tokenized texts (or text pairs) on the device; padded to a bucket on XLA, to the longest elsewhere."""
        encoded = self.tokenizer(*texts, padding=True, truncation=True, max_length=self.max_seq_len,
                                 return_tensors="pt")
        if self.xla:
            rows, length = encoded["input_ids"].shape
            seq = self.pad_to_bucket(length, self.bucket_seq_len)
            batch = self.pad_to_bucket(rows, self.bucket_batch_size)
            pad_id = self.tokenizer.pad_token_id or 0
            padded = {}
            for key, value in encoded.items():
                fill = pad_id if key == "input_ids" else 0
                out = torch.full((max(batch, rows), seq), fill, dtype=value.dtype)
                out[:rows, :length] = value
                padded[key] = out
            encoded = padded
        return {k: v.to(self.device) for k, v in encoded.items()}

    def output(self, name: str, array: np.ndarray) -> pb_utils.Tensor:
        return pb_utils.Tensor(name, np.ascontiguousarray(array.astype(self.output_dtypes.get(name, np.float32))))

    @staticmethod
    def error(message: str, bad_request: bool = True) -> pb_utils.InferenceResponse:
        """An error response: a client error (HTTP 400) by default, else an internal one (500)."""
        code = pb_utils.TritonError.INVALID_ARG if bad_request else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, code))

    # -- text_input tasks -------------------------------------------------------------------------------------

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse]:
        """Decode every request's ``text_input``, run them as one batch, split the results back per request."""
        responses: list[Any] = [None] * len(requests)
        texts: list[str] = []
        spans: list[tuple[int, int, int, tuple[int, ...]]] = []  # (request index, start, end, input shape)
        for i, request in enumerate(requests):
            try:
                strings, shape = decode_strings(request, "text_input")
            except RequestError as exc:
                responses[i] = self.error(str(exc))
                continue
            spans.append((i, len(texts), len(texts) + len(strings), shape))
            texts.extend(strings)
        if texts:
            try:
                with torch.inference_mode():
                    encoded = self.tokenize(texts)
                    results = self.forward(encoded, len(texts))
            except Exception as exc:  # the batch's requests get the error, the server stays up
                for i, *_ in spans:
                    responses[i] = self.error(f"inference failed: {type(exc).__name__}: {exc}", bad_request=False)
                return responses
            mask = encoded["attention_mask"][: len(texts)].cpu()
            for i, start, end, shape in spans:
                responses[i] = pb_utils.InferenceResponse(
                    output_tensors=self.outputs_for(results, start, end, mask[start:end], shape))
        return responses

    def forward(self, encoded: dict[str, torch.Tensor], rows: int) -> dict[str, np.ndarray]:
        """The task's results for the first ``rows`` rows of the batch, as numpy arrays by output name."""
        raise NotImplementedError

    def outputs_for(self, results: dict[str, np.ndarray], start: int, end: int, mask: torch.Tensor,
                    shape: tuple[int, ...]) -> list[pb_utils.Tensor]:
        """One request's output tensors: its rows of every result (one row per input string)."""
        return [self.output(name, value[start:end]) for name, value in results.items()]

    def per_token(self, results: dict[str, np.ndarray], start: int, end: int,
                  mask: torch.Tensor) -> list[pb_utils.Tensor]:
        """Per-token outputs cut to the request's own longest sequence (not the batch's)."""
        length = int(mask.sum(dim=1).max()) if mask.numel() else 0
        cut = slice(-length, None) if self.tokenizer.padding_side == "left" and length else slice(0, length)
        return [self.output(name, value[start:end, cut]) for name, value in results.items()]
