"""Base classes of the vision-language scripts: :class:`BaseVLMAdapter` (the per-family interface) and the
datasets :class:`VLMDataset` / :class:`VLMCPTDataset` (loaded lazily: they need torch)."""

from __future__ import annotations

from typing import Any

from .base_adapter import BaseVLMAdapter

__all__ = ["BaseVLMAdapter", "VLMCPTDataset", "VLMCollator", "VLMDataset"]


def __getattr__(name: str) -> Any:
    if name in ("VLMDataset", "VLMCPTDataset", "VLMCollator"):
        from . import base_dataset

        return getattr(base_dataset, name)
    raise AttributeError(name)
