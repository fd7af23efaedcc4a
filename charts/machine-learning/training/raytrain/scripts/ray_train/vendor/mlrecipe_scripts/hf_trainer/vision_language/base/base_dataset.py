"""Torch datasets of image + conversation samples, processed through an adapter, and their collator.

* :class:`VLMDataset` (SFT): the conversation goes through the chat template with one image slot per image, then
  through the processor (images + text). Labels are the **assistant turns only** (their text and end-of-turn
  token): each assistant turn's token span is found by rendering the conversation up to that turn, with and
  without it, and measuring the two prefixes. When a chat template does not render prefixes consistently, the
  reference heuristic is used instead (first 60 % of the tokens masked) and a warning is logged once.
* :class:`VLMCPTDataset` (continual pre-training): every token is a target.
* A sample longer than ``max_seq_length`` has its images halved up to 3 times; a sample that still does not fit or
  whose image cannot be read is replaced by the next usable one (warning logged). Rows are validated when the
  dataset is created (JSON, turns, local image files exist), so bad input fails at once with ``path:line``.
* :class:`VLMCollator` pads (right side) and concatenates vision tensors, so batches larger than 1 work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mlrecipe_scripts.hf_trainer.common_base import ScriptError, log
from mlrecipe_scripts.hf_trainer.vision_language.vlm_dataset import SampleError, load_image, read_vlm_jsonl

from .base_adapter import BaseVLMAdapter

HEURISTIC_MASK_SHARE = 0.6
MAX_REPLACEMENTS = 16
MAX_WARNINGS = 10


class VLMDataset(torch.utils.data.Dataset):
    """SFT samples from a VLM JSONL file (see ``dataset_module``), labels on the assistant turns."""

    MAX_RESIZE_ATTEMPTS = 3
    mask_prompt = True

    def __init__(self, data_path: Path | str, adapter: BaseVLMAdapter, processor: Any, tokenizer: Any = None,
                 max_seq_length: int = 2048, is_test: bool = False, max_samples: int | None = None,
                 require_images: bool = False, samples: list[dict[str, Any]] | None = None):
        self.data_path = Path(data_path)
        if samples is None and not self.data_path.is_file():
            raise ScriptError(f"{self.data_path}: no such file (is --data_dir complete?)")
        self.adapter = adapter
        self.processor = processor
        self.tokenizer = tokenizer if tokenizer is not None else getattr(processor, "tokenizer", processor)
        self.max_seq_length = max_seq_length
        self.is_test = is_test  # reference meaning: no label masking
        # rows already read (and validated) with dataset_module.read_vlm_jsonl, or read here
        self.samples = samples if samples is not None else read_vlm_jsonl(self.data_path, max_samples, require_images)
        self._warnings = 0
        self._heuristic_noted = False

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def text_only_rows(self) -> int:
        """How many rows have no image."""
        return sum(1 for s in self.samples if not s["images"])

    # ---------------------------------------------------------------- one sample

    def _warn(self, message: str) -> None:
        if self._warnings < MAX_WARNINGS:
            log(f"warning: {message}")
        self._warnings += 1

    def _process(self, text: str, images: list[Any]) -> Any:
        if images:
            return self.processor(text=[text], images=images, return_tensors="pt")
        return self.processor(text=[text], return_tensors="pt")

    def _fit(self, text: str, images: list[Any]) -> tuple[Any, list[Any]]:
        """Processor outputs within ``max_seq_length`` (images halved up to MAX_RESIZE_ATTEMPTS times)."""
        from PIL import Image

        for attempt in range(self.MAX_RESIZE_ATTEMPTS + 1):
            inputs = self._process(text, images)
            length = int(inputs["input_ids"].shape[-1])
            if length <= self.max_seq_length:
                return inputs, images
            if not images or attempt == self.MAX_RESIZE_ATTEMPTS:
                break
            side = self.adapter.min_image_side()
            images = [im.resize((max(im.width // 2, side), max(im.height // 2, side)), Image.Resampling.LANCZOS)
                      for im in images]
        raise SampleError(f"{length} tokens > --max_seq_length={self.max_seq_length}"
                          + (f" even with the images shrunk {self.MAX_RESIZE_ATTEMPTS} times" if images else ""))

    def _prefix_length(self, prefix: str, inputs: Any, images: list[Any], input_ids: list[int]) -> int | None:
        """How many tokens the processor makes of ``prefix`` (a prefix of the sample's text); None if unsure."""
        expanded = self.adapter.expand_image_tokens(prefix, inputs, self.processor)
        if expanded is not None:
            ids = self.tokenizer(expanded)["input_ids"]
        else:
            token = getattr(self.processor, "image_token", None)
            n_images = prefix.count(token) if token else 0
            ids = self._process(prefix, images[:n_images])["input_ids"][0].tolist()
        ids = list(ids)
        return len(ids) if ids == input_ids[: len(ids)] else None

    def _answer_spans(self, messages: list[dict[str, Any]], text: str, inputs: Any, images: list[Any]
                      ) -> list[tuple[int, int]] | None:
        """Token spans ``[start, end)`` of the assistant turns; None when they cannot be located exactly."""
        input_ids = inputs["input_ids"][0].tolist()
        spans = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = self.adapter.render(messages[:i], self.processor, add_generation_prompt=True) if i else ""
            through = self.adapter.render(messages[: i + 1], self.processor)
            if not (text.startswith(through) and through.startswith(before)):
                return None
            start = self._prefix_length(before, inputs, images, input_ids) if before else 0
            end = self._prefix_length(through, inputs, images, input_ids)
            if start is None or end is None or end < start:
                return None
            spans.append((start, end))
        return spans

    def _labels(self, messages: list[dict[str, Any]], text: str, inputs: Any, images: list[Any]) -> Any:
        input_ids = inputs["input_ids"][0]
        if not self.mask_prompt or self.is_test:
            return input_ids.clone()
        labels = torch.full_like(input_ids, -100)
        spans = self._answer_spans(messages, text, inputs, images)
        if spans is None:
            if not self._heuristic_noted:
                log(f"warning: {self.data_path}: the chat template does not render conversation prefixes "
                    f"consistently; masking the first {int(HEURISTIC_MASK_SHARE * 100)}% of each sample instead")
                self._heuristic_noted = True
            cut = int(len(input_ids) * HEURISTIC_MASK_SHARE)
            labels[cut:] = input_ids[cut:]
            return labels
        for start, end in spans:
            labels[start:end] = input_ids[start:end]
        return labels

    def build(self, index: int) -> dict[str, Any]:
        """The processed sample ``index`` (raises :class:`SampleError` when it cannot be used)."""
        sample = self.samples[index]
        images = [load_image(src, self.data_path.parent) for src in sample["images"]]
        messages = self.adapter.to_messages(sample["conversations"], len(images))
        text = self.adapter.render(messages, self.processor)
        if not text or not text.strip():
            raise SampleError("the chat template rendered an empty text")
        inputs, images = self._fit(text, images)
        labels = self._labels(messages, text, inputs, images)
        length = int(inputs["input_ids"].shape[-1])
        out: dict[str, Any] = {}
        for key, value in inputs.items():
            if not isinstance(value, torch.Tensor):
                continue
            if value.dim() == 2 and value.shape[0] == 1 and value.shape[1] == length:
                out[key] = value[0]  # per-token: input_ids, attention_mask, mm_token_type_ids ...
            else:
                out[key] = value  # vision tensors keep their layout (concatenated by the collator)
        out["labels"] = labels
        out.setdefault("attention_mask", torch.ones_like(out["input_ids"]))
        return out

    def __getitem__(self, index: int) -> dict[str, Any]:
        for step in range(min(MAX_REPLACEMENTS, len(self.samples))):
            current = (index + step) % len(self.samples)
            try:
                return self.build(current)
            except SampleError as exc:
                line = self.samples[current]["line"]
                self._warn(f"{self.data_path}:{line}: {exc}; using the next sample instead")
        raise RuntimeError(f"{self.data_path}: {MAX_REPLACEMENTS} samples in a row from index {index} are unusable")


class VLMCPTDataset(VLMDataset):
    """Continual pre-training samples: every token (prompt, image slots, answers) is a target."""

    mask_prompt = False


class VLMCollator:
    """Batches processed samples with the adapter's :meth:`~BaseVLMAdapter.collate` (right padding)."""

    def __init__(self, adapter: BaseVLMAdapter, pad_token_id: int, pad_to_multiple_of: int | None = 8):
        self.adapter = adapter
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        return self.adapter.collate(features, self.pad_token_id, self.pad_to_multiple_of)
