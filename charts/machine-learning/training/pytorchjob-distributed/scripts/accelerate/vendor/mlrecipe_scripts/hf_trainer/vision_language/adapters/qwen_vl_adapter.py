"""Adapter for the Qwen-VL family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE).

* Model class by the config's ``model_type`` (``Qwen3VLForConditionalGeneration`` for ``qwen3_vl`` ...), with the
  precision and attention the caller picks (bf16 + sdpa on CUDA, fp32 + sdpa on CPU; eager when sdpa is missing).
* Processor: ``AutoProcessor``. These processors also hold a *video* processor, which transformers builds only
  with torchvision installed; without it (or when the model directory has no video-processor config) the same
  processor class is built without the video part (images and text work as usual) and a note is logged.
* Dynamic resolution: the processor expands each ``<|image_pad|>`` into ``grid_t*grid_h*grid_w / merge_size**2``
  tokens; :meth:`expand_image_tokens` reproduces that so prompt lengths can be measured with the tokenizer alone.
* LoRA on the language model's ``q/k/v/o/gate/up/down_proj``; with ``--lora_on_vision`` also on the vision blocks'
  attention (``attn.qkv``, ``attn.proj``) and MLP. The vision tower is every parameter under ``visual`` (its
  ``merger`` included).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer.vision_language.base.base_adapter import (
    BaseVLMAdapter,
    model_file,
    read_json_file,
    read_model_config,
)

MODEL_CLASSES = {
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
}
PROCESSOR_CLASSES = {
    "qwen3_vl": "Qwen3VLProcessor",
    "qwen3_vl_moe": "Qwen3VLProcessor",
    "qwen2_5_vl": "Qwen2_5_VLProcessor",
    "qwen2_vl": "Qwen2VLProcessor",
}
LANGUAGE_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VISION_TARGETS = [
    "visual.blocks.*.attn.qkv",
    "visual.blocks.*.attn.proj",
    "visual.blocks.*.mlp.fc1",  # Qwen2-VL
    "visual.blocks.*.mlp.fc2",
    "visual.blocks.*.mlp.linear_fc1",  # Qwen3-VL
    "visual.blocks.*.mlp.linear_fc2",
    "visual.blocks.*.mlp.gate_proj",  # Qwen2.5-VL
    "visual.blocks.*.mlp.up_proj",
    "visual.blocks.*.mlp.down_proj",
]
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")


class QwenVLAdapter(BaseVLMAdapter):
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL."""

    def __init__(self) -> None:
        self.processor_note: str | None = None  # set when the processor was built without its video part

    @property
    def model_family(self) -> str:
        return "qwen-vl"

    @property
    def supported_models(self) -> list[str]:
        return [
            "Qwen/Qwen3-VL-8B-Instruct",
            "Qwen/Qwen3-VL-2B-Instruct",
            "Qwen/Qwen3-VL-4B-Instruct",
            "Qwen/Qwen3-VL-32B-Instruct",
            "Qwen/Qwen3-VL-30B-A3B-Instruct",
            "Qwen/Qwen2.5-VL-3B-Instruct",
            "Qwen/Qwen2.5-VL-7B-Instruct",
            "Qwen/Qwen2.5-VL-32B-Instruct",
            "Qwen/Qwen2.5-VL-72B-Instruct",
            "Qwen/Qwen2-VL-2B-Instruct",
            "Qwen/Qwen2-VL-7B-Instruct",
        ]

    @property
    def model_types(self) -> list[str]:
        return list(MODEL_CLASSES)

    # ---------------------------------------------------------------- loading

    def model_class_name(self, model_path: str) -> str:
        """The transformers class for the model at ``model_path`` (by ``model_type``; Qwen3-VL by default)."""
        config = read_model_config(model_path)
        name = MODEL_CLASSES.get(config.get("model_type", ""))
        if name is None:
            import transformers

            arch = [a for a in config.get("architectures") or [] if hasattr(transformers, a)]
            name = arch[0] if arch else "AutoModelForImageTextToText" if config else MODEL_CLASSES["qwen3_vl"]
        return name

    def load_model(self, model_path: str, **kwargs: Any) -> Any:
        """The model in ``dtype`` with ``attn_implementation`` (falls back to eager); ``use_cache`` set afterwards.

        Keyword arguments: ``dtype``, ``attn_implementation``, ``trust_remote_code``, ``use_cache``, ``flag`` (the
        flag that named ``model_path``, for error messages), ``loader`` (a function with the signature of
        ``shared.common.load_pretrained``, which is the default); others go to ``from_pretrained``.
        """
        load_pretrained = kwargs.pop("loader", None)
        if load_pretrained is None:
            from mlrecipe_scripts.hf_trainer.common_base import load_pretrained

        flag = kwargs.pop("flag", "--model_path")
        use_cache = kwargs.pop("use_cache", None)
        dtype = kwargs.pop("dtype", kwargs.pop("torch_dtype", "auto"))
        attn = kwargs.pop("attn_implementation", "sdpa")
        trust = kwargs.pop("trust_remote_code", True)
        model = load_pretrained(model_path, flag, self.model_class_name(model_path), dtype=dtype,
                                attn_implementation=attn, trust_remote_code=trust, **kwargs)
        if use_cache is not None:
            model.config.use_cache = use_cache
            text_config = getattr(model.config, "text_config", None)
            if text_config is not None:
                text_config.use_cache = use_cache
        return model

    def processor_class_name(self, model_path: str) -> str:
        """The processor class named by the model's processor / tokenizer configs (else by ``model_type``)."""
        for name in PROCESSOR_FILES:
            value = read_json_file(model_path, name).get("processor_class")
            if value:
                return str(value)
        return PROCESSOR_CLASSES.get(read_model_config(model_path).get("model_type", ""), "Qwen3VLProcessor")

    def load_processor(self, model_path: str, **kwargs: Any) -> Any:
        """``AutoProcessor.from_pretrained``; without torchvision (or without a video-processor config) the same
        processor class without its video processor. Raises the loading error when neither works."""
        from transformers import AutoProcessor

        try:
            return AutoProcessor.from_pretrained(model_path, **kwargs)
        except Exception as exc:
            no_torchvision = importlib.util.find_spec("torchvision") is None
            if not (no_torchvision or "video" in str(exc).lower()):
                raise
            reason = "torchvision is not installed" if no_torchvision else "the model has no video-processor config"
            first_error = exc
        cls = self._image_only_processor_class(self.processor_class_name(model_path))
        try:
            processor = cls.from_pretrained(model_path, **kwargs)
        except Exception:
            raise first_error from None
        self.processor_note = f"{reason}: {cls.__name__} is built without its video processor (images and text only)"
        return processor

    @staticmethod
    def _image_only_processor_class(name: str) -> Any:
        """A subclass of the processor class ``name`` whose only parts are the image processor and the tokenizer.

        It keeps the class name, so what it saves names the real class.
        """
        import transformers

        base = getattr(transformers, name, None) or transformers.Qwen3VLProcessor

        class ImageOnlyProcessor(base):  # type: ignore[misc, valid-type]
            def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                         **kwargs: Any) -> None:
                super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

        ImageOnlyProcessor.__name__ = base.__name__
        ImageOnlyProcessor.__qualname__ = base.__qualname__
        return ImageOnlyProcessor

    def save_processor(self, processor: Any, source: str, target: str) -> None:
        """``processor.save_pretrained(target)``; an image-only processor also carries over the source's video
        processor config, so the saved directory is as complete as the source."""
        processor.save_pretrained(target)
        if self.processor_note is None:
            return
        dst = Path(target)
        video = model_file(source, "video_preprocessor_config.json")
        if video is not None and not (dst / "video_preprocessor_config.json").exists():
            (dst / "video_preprocessor_config.json").write_bytes(video.read_bytes())
        source_config = read_json_file(source, "processor_config.json")
        try:
            target_config = json.loads((dst / "processor_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if "video_processor" in source_config and "video_processor" not in target_config:
            target_config["video_processor"] = source_config["video_processor"]
            (dst / "processor_config.json").write_text(json.dumps(target_config, indent=2) + "\n", encoding="utf-8")

    # ---------------------------------------------------------------- images and text

    def min_image_side(self) -> int:
        return 32

    def expand_image_tokens(self, text: str, inputs: Any, processor: Any) -> str | None:
        """Each ``<|image_pad|>`` in ``text`` repeated ``grid.prod() // merge_size**2`` times (image k gets the k-th
        grid of ``inputs["image_grid_thw"]``), as the Qwen processors do."""
        token = getattr(processor, "image_token", "<|image_pad|>")
        grids = inputs.get("image_grid_thw") if hasattr(inputs, "get") else None
        if token not in text:
            return text
        if grids is None:
            return None
        merge = int(getattr(processor.image_processor, "merge_size", 2)) ** 2
        counts = [int(g.prod()) // merge for g in grids]
        parts = text.split(token)
        if len(parts) - 1 > len(counts):
            return None
        out = [parts[0]]
        for count, part in zip(counts, parts[1:], strict=False):
            out.append(token * count + part)
        return "".join(out)

    # ---------------------------------------------------------------- LoRA and freezing

    def get_lora_target_modules(self, include_vision: bool = False) -> list[str]:
        return LANGUAGE_TARGETS + (VISION_TARGETS if include_vision else [])

    def get_vision_encoder_modules(self) -> list[str]:
        return ["visual", "merger"]

    # ---------------------------------------------------------------- description

    def supports_dynamic_resolution(self) -> bool:
        return True

    def get_default_image_size(self) -> int:
        return 448

    def get_special_tokens(self) -> dict[str, str]:
        return {"image_token": "<|image_pad|>", "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>"}
