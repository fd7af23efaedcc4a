"""Evaluate Helm template expressions in plain strings with the real Helm engine.

Reference recipes put expressions such as ``{{ .Release.Name }}`` or
``{{ mul .Values.resources.num_nodes .Values.resources.procs_per_node }}`` in values; the charts
apply ``tpl`` to them. The local and Slurm backends evaluate them the same way through a tiny
chart (created once per process) rendered by helm_python, so every backend agrees with
``helm install``.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

from mlrecipe.errors import TemplateError
from mlrecipe.helm._engine import LOCK, load_chart

_KEY = "__mlrecipe_strings"
_TEMPLATE = (
    "{{- $out := list -}}\n"
    "{{- range $s := .Values." + _KEY + " }}{{ $out = append $out (tpl (toString $s) $) }}{{ end -}}\n"
    "{{- toJson $out -}}\n"
)


@functools.lru_cache(maxsize=1)
def _chart_dir() -> str:
    root = Path(tempfile.mkdtemp(prefix="mlrecipe-tpl-"))
    (root / "templates").mkdir()
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: mlrecipe-tpl\nversion: 0.1.0\n", encoding="utf-8")
    (root / "templates" / "strings.json").write_text(_TEMPLATE, encoding="utf-8")
    return str(root)


def expand_templates(strings: list[str], values: dict[str, Any], release: str, namespace: str) -> list[str]:
    """Return ``strings`` with Helm expressions evaluated (``tpl``) against ``values`` and the release.

    Strings without ``{{`` come back untouched, and a list without any never reaches Helm.
    Raises :class:`TemplateError` when an expression fails.
    """
    strings = [str(s) for s in strings]
    if not any("{{" in s for s in strings):
        return list(strings)
    from helm_python import HelmError

    todo = [s for s in strings if "{{" in s]
    try:
        with LOCK:
            chart = load_chart(_chart_dir())
            rendered = chart.render({**values, _KEY: todo}, name=release, namespace=namespace)
    except HelmError as exc:
        raise TemplateError(f"Helm expression failed: {getattr(exc, 'detail', exc)}") from None
    text = next(iter(rendered.values()), "[]")
    done = iter(json.loads(text))
    return [next(done) if "{{" in s else s for s in strings]
