"""Helm chart rendering (through the real Helm engine, helm_python) and manifest validation."""

from mlrecipe.helm.render import ChartRenderError, SchemaError, chart_path, render_chart, render_text

__all__ = ["ChartRenderError", "SchemaError", "chart_path", "render_chart", "render_text"]
