"""Registry of the vision-language adapters and how a model is matched to one.

:func:`get_adapter_for_model` picks the adapter for a model:

1. by the ``model_type`` in the model's ``config.json`` (a local model directory, or a hub id already in the
   local Hugging Face cache; nothing is downloaded), e.g. ``qwen3_vl`` -> ``qwen-vl``;
2. otherwise (no readable config, or a ``model_type`` no adapter claims) by the reference rule: a
   case-insensitive substring match of the model id / path against the adapters' supported hub ids
   (``/models/Qwen/Qwen3-VL-8B-Instruct`` -> ``qwen-vl``).

No match raises ``ValueError`` (the scripts turn it into one ``error:`` line naming the flag).
"""

from __future__ import annotations

from mlrecipe_scripts.hf_trainer.vision_language.base.base_adapter import BaseVLMAdapter, read_model_config

from .qwen_vl_adapter import QwenVLAdapter

ADAPTER_REGISTRY: dict[str, type[BaseVLMAdapter]] = {
    "qwen-vl": QwenVLAdapter,
}


def read_model_type(model_path: str) -> str | None:
    """``model_type`` of the model's ``config.json`` (local directory or cached hub id); None when unknown."""
    value = read_model_config(model_path).get("model_type")
    return str(value) if value else None


def get_adapter_for_model(model_id: str, model_type: str | None = None) -> BaseVLMAdapter:
    """A new instance of the adapter for ``model_id`` (a hub id or a local model directory).

    ``model_type`` defaults to the one in the model's ``config.json``. Raises ``ValueError`` when no adapter fits.
    """
    model_type = model_type if model_type is not None else read_model_type(model_id)
    adapters = [cls() for cls in ADAPTER_REGISTRY.values()]
    if model_type:
        for adapter in adapters:
            if adapter.matches_model_type(model_type):
                return adapter
    for adapter in adapters:
        if adapter.validate_model_id(model_id):
            return adapter
    families = ", ".join(f"{a.model_family} (model_type {'/'.join(a.model_types) or '-'})" for a in adapters)
    what = f"model_type '{model_type}'" if model_type else "no readable config.json, and the name matches no " \
                                                              "supported model id"
    raise ValueError(f"no vision-language adapter for {model_id} ({what}); adapters: {families}; "
                     "see --list_models")


def list_supported_models() -> dict[str, list[str]]:
    """Adapter name -> the hub ids it supports."""
    return {name: cls().supported_models for name, cls in ADAPTER_REGISTRY.items()}


def get_adapter_info(adapter_name: str) -> dict:
    """:meth:`BaseVLMAdapter.get_model_info` of a registered adapter (``ValueError`` when unknown)."""
    if adapter_name not in ADAPTER_REGISTRY:
        raise ValueError(f"adapter '{adapter_name}' not found; available: {sorted(ADAPTER_REGISTRY)}")
    return ADAPTER_REGISTRY[adapter_name]().get_model_info()


def register_adapter(name: str, adapter_class: type[BaseVLMAdapter]) -> None:
    """Add (or replace) an adapter class under ``name``."""
    if not (isinstance(adapter_class, type) and issubclass(adapter_class, BaseVLMAdapter)):
        raise TypeError(f"an adapter must be a BaseVLMAdapter subclass, got {adapter_class!r}")
    ADAPTER_REGISTRY[name] = adapter_class


def format_supported_models() -> str:
    """The registry as text (what ``--list_models`` prints)."""
    lines = ["Supported vision-language models", ""]
    total = 0
    for name, models in list_supported_models().items():
        info = get_adapter_info(name)
        lines.append(f"{name}")
        lines.append(f"  model_type (config.json): {', '.join(info['model_types']) or '-'}")
        lines.append(f"  dynamic resolution: {info['dynamic_resolution']}; "
                     f"default image size: {info['default_image_size']}")
        lines.append("  models:")
        lines += [f"    - {model}" for model in models]
        lines.append("")
        total += len(models)
    lines.append(f"{len(ADAPTER_REGISTRY)} adapter(s), {total} model id(s); a local model directory matches by its "
                 "config.json model_type")
    return "\n".join(lines)


def print_supported_models() -> None:
    """Print :func:`format_supported_models`."""
    print(format_supported_models(), flush=True)


if __name__ == "__main__":
    print_supported_models()
