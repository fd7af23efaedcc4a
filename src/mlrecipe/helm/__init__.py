"""Helm chart rendering (through the real Helm engine, helm_python) and manifest validation.

The rendering names are loaded on first use, so that :mod:`mlrecipe.helm.tpl` (``validate``'s check of the values'
expressions, which most recipes pass without Helm) does not load the engine's modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlrecipe.helm.render import ChartRenderError, SchemaError, chart_path, render_chart, render_text

__all__ = ["ChartRenderError", "SchemaError", "chart_path", "render_chart", "render_text"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from mlrecipe.helm import render

        return getattr(render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
