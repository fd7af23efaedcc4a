"""Code shared by the accelerate text and multimodal scripts.

``SaveOnBestMetricCallback`` (and the other callbacks) are loaded lazily, so that importing ``shared.common`` does
not import ``transformers``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MetricsFileCallback", "SaveOnBestMetricCallback"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from shared import callbacks

        return getattr(callbacks, name)
    raise AttributeError(name)
