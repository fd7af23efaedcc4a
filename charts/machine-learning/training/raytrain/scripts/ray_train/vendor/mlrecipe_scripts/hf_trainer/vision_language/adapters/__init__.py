"""Model-family adapters for the vision-language scripts and the registry that picks one for a model."""

from .qwen_vl_adapter import QwenVLAdapter
from .registry import (
    ADAPTER_REGISTRY,
    get_adapter_for_model,
    get_adapter_info,
    list_supported_models,
    print_supported_models,
    register_adapter,
)

__all__ = [
    "ADAPTER_REGISTRY",
    "QwenVLAdapter",
    "get_adapter_for_model",
    "get_adapter_info",
    "list_supported_models",
    "print_supported_models",
    "register_adapter",
]
