"""The interface every vision-language model family implements (:class:`BaseVLMAdapter`).

An adapter hides what differs between VLM families: which model class to load, how the processor is built, how a
``[{"from": "human"|"gpt", "value": ...}]`` conversation becomes a chat-template prompt with image slots, which
modules get LoRA and which belong to the vision tower, and how processed samples are batched.

Only the standard library is imported at module level (``torch`` / ``transformers`` inside the methods), so
``--list_models``, ``--help`` and argument errors stay fast.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

IMAGE_TAG = "<image>"
ROLE_OF = {"human": "user", "gpt": "assistant", "system": "system"}


def model_file(model_path: str, filename: str) -> Path | None:
    """``filename`` of a model: in the local directory ``model_path``, or for a hub id in the local Hugging Face
    cache (never downloaded). None when it is not there."""
    local = Path(model_path).expanduser()
    if local.is_dir():
        return local / filename if (local / filename).is_file() else None
    if local.exists() or model_path.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_path, filename)
    except Exception:
        return None
    return Path(cached) if isinstance(cached, str) else None


def read_json_file(model_path: str, filename: str) -> dict[str, Any]:
    """A JSON file of the model (see :func:`model_file`) as a dict; {} when missing or unreadable."""
    path = model_file(model_path, filename)
    if path is None:
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def read_model_config(model_path: str) -> dict[str, Any]:
    """The model's ``config.json`` as a dict ({} when it cannot be read)."""
    return read_json_file(model_path, "config.json")


class BaseVLMAdapter(ABC):
    """One VLM family. Subclasses must name the family and its models and say how to load them."""

    # ---------------------------------------------------------------- identification

    @property
    @abstractmethod
    def model_family(self) -> str:
        """The family name (e.g. ``qwen-vl``); also the registry key."""

    @property
    @abstractmethod
    def supported_models(self) -> list[str]:
        """Hub ids this adapter is meant for; a model path containing one of them (any case) matches."""

    @property
    def model_types(self) -> list[str]:
        """``config.json`` ``model_type`` values this adapter handles (how a local model directory is matched)."""
        return []

    def validate_model_id(self, model_id: str) -> bool:
        """True when ``model_id`` (a hub id or a path) contains one of :attr:`supported_models`, ignoring case."""
        lowered = model_id.lower()
        return any(supported.lower() in lowered for supported in self.supported_models)

    def matches_model_type(self, model_type: str | None) -> bool:
        """True when ``model_type`` (from the model's ``config.json``) is one this adapter handles."""
        return bool(model_type) and model_type in self.model_types

    # ---------------------------------------------------------------- loading

    @abstractmethod
    def load_model(self, model_path: str, **kwargs: Any) -> Any:
        """The model (``dtype``, ``attn_implementation``, ``use_cache``, ``flag`` ... in ``kwargs``)."""

    @abstractmethod
    def load_processor(self, model_path: str, **kwargs: Any) -> Any:
        """The processor (image processor + tokenizer + chat template)."""

    def save_processor(self, processor: Any, source: str, target: str) -> None:
        """Save ``processor`` into ``target`` (``source`` is the model it came from)."""
        processor.save_pretrained(target)

    # ---------------------------------------------------------------- images

    def process_image(self, image: Any, processor: Any) -> Any:
        """``pixel_values`` of one image."""
        return processor.image_processor(images=image, return_tensors="pt")["pixel_values"]

    def process_images_batch(self, images: list[Any], processor: Any) -> Any:
        """``pixel_values`` of several images."""
        return processor.image_processor(images=images, return_tensors="pt")["pixel_values"]

    def min_image_side(self) -> int:
        """The smallest side an image may be shrunk to when a sample is too long."""
        return 28

    # ---------------------------------------------------------------- text

    def to_messages(self, conversations: list[dict[str, str]], n_images: int = 0) -> list[dict[str, Any]]:
        """Normalised turns -> chat messages with typed content; each ``<image>`` in a turn becomes an image slot.

        Images with no ``<image>`` tag of their own are put at the start of the first user turn.
        """
        messages: list[dict[str, Any]] = []
        tags = sum(str(turn["value"]).count(IMAGE_TAG) for turn in conversations)
        missing = max(0, n_images - tags)
        for turn in conversations:
            role = ROLE_OF.get(turn["from"], "assistant")
            content: list[dict[str, Any]] = []
            if role == "user" and missing:
                content += [{"type": "image"}] * missing
                missing = 0
            for i, part in enumerate(str(turn["value"]).split(IMAGE_TAG)):
                if i > 0:
                    content.append({"type": "image"})
                if part.strip():
                    content.append({"type": "text", "text": part.strip()})
            if not content:
                content = [{"type": "text", "text": str(turn["value"])}]
            messages.append({"role": role, "content": content})
        return messages

    def render(self, messages: list[dict[str, Any]], processor: Any, add_generation_prompt: bool = False) -> str:
        """The chat-template text of ``messages`` (not tokenized)."""
        return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def format_conversation(self, conversations: list[dict[str, str]], processor: Any, tokenizer: Any = None,
                            n_images: int = 0) -> str:
        """A ``[{"from", "value"}]`` conversation as chat-template text (reference interface)."""
        return self.render(self.to_messages(conversations, n_images), processor)

    def tokenize_conversation(self, formatted_text: str, tokenizer: Any, max_length: int) -> dict[str, Any]:
        """Text-only tokenization of a formatted conversation (truncated to ``max_length``)."""
        return tokenizer(formatted_text, truncation=True, max_length=max_length, padding=False,
                         add_special_tokens=True)

    def expand_image_tokens(self, text: str, inputs: Any, processor: Any) -> str | None:
        """``text`` with each image placeholder expanded as the processor expands it for ``inputs``; None when
        the adapter cannot tell (then prefixes are measured by running the processor on them)."""
        return None

    # ---------------------------------------------------------------- LoRA and freezing

    @abstractmethod
    def get_lora_target_modules(self, include_vision: bool = False) -> list[str]:
        """Module-name suffixes that get LoRA (informational; :meth:`lora_target_regex` is what is applied)."""

    @abstractmethod
    def get_vision_encoder_modules(self) -> list[str]:
        """Substrings of parameter names that belong to the vision tower (frozen by ``--freeze_vision_encoder``)."""

    def lora_target_regex(self, include_vision: bool = False) -> str:
        """A regular expression (PEFT ``fullmatch``) selecting the LoRA modules.

        Language-model projections only, unless ``include_vision``; the default derives it from
        :meth:`get_lora_target_modules` and :meth:`get_vision_encoder_modules`.
        """
        vision = "|".join(re.escape(v) for v in self.get_vision_encoder_modules())
        names = "|".join(re.escape(t) for t in self.get_lora_target_modules(False))
        language = rf"^(?!.*(?:{vision})).*\.(?:{names})$" if vision else rf"^.*\.(?:{names})$"
        if not include_vision:
            return language
        extra = [t for t in self.get_lora_target_modules(True) if t not in self.get_lora_target_modules(False)]
        if not extra:
            return language
        patterns = "|".join(re.escape(t).replace(r"\*", r"[^.]+") for t in extra)
        return rf"(?:{language})|(?:^.*(?:{patterns})$)"

    def freeze_vision_encoder(self, model: Any) -> int:
        """Set ``requires_grad=False`` on the vision tower's parameters; returns how many values were frozen."""
        names = self.get_vision_encoder_modules()
        frozen = 0
        for name, param in model.named_parameters():
            if any(n in name for n in names):
                param.requires_grad = False
                frozen += param.numel()
        return frozen

    def count_trainable_parameters(self, model: Any) -> dict[str, float]:
        """``{"trainable", "total", "percentage"}``."""
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        return {"trainable": trainable, "total": total, "percentage": 100 * trainable / total if total else 0.0}

    def vision_is_trainable(self, model: Any) -> bool:
        """True when some vision-tower parameter (base weight or LoRA) requires a gradient."""
        names = self.get_vision_encoder_modules()
        return any(p.requires_grad and any(n in name for n in names) for name, p in model.named_parameters())

    # ---------------------------------------------------------------- batching

    def collate(self, features: list[dict[str, Any]], pad_token_id: int, pad_to_multiple_of: int | None = 8
                ) -> dict[str, Any]:
        """Pad the per-token tensors (right side: pad id, attention 0, labels -100, other ids 0) and concatenate the
        vision tensors (``pixel_values``, ``image_grid_thw``, ...) along their first dimension."""
        import torch

        length = max(int(f["input_ids"].shape[0]) for f in features)
        if pad_to_multiple_of:
            length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
        fill = {"input_ids": pad_token_id, "labels": -100}
        batch: dict[str, Any] = {}
        keys = [k for k in features[0] if all(k in f for f in features)]
        keys += [k for f in features for k in f if k not in keys]
        for key in dict.fromkeys(keys):
            values = [f[key] for f in features if key in f]
            per_token = all(v.dim() == 1 for v in values) and len(values) == len(features) and \
                all(v.shape[0] == f["input_ids"].shape[0] for v, f in zip(values, features, strict=True))
            if per_token:
                out = torch.full((len(values), length), fill.get(key, 0), dtype=values[0].dtype)
                for i, v in enumerate(values):
                    out[i, : v.shape[0]] = v
                batch[key] = out
            else:
                batch[key] = torch.cat(values, dim=0)
        return batch

    # ---------------------------------------------------------------- description

    def supports_dynamic_resolution(self) -> bool:
        """Whether images keep their own resolution (vs. a fixed square)."""
        return False

    def get_default_image_size(self) -> int:
        """A typical input side in pixels."""
        return 336

    def get_special_tokens(self) -> dict[str, str]:
        """The family's image-related special tokens."""
        return {}

    def get_model_info(self) -> dict[str, Any]:
        """What ``--list_models`` and the training log show."""
        return {
            "family": self.model_family,
            "supported_models": self.supported_models,
            "model_types": self.model_types,
            "dynamic_resolution": self.supports_dynamic_resolution(),
            "default_image_size": self.get_default_image_size(),
            "special_tokens": self.get_special_tokens(),
        }
