"""Chart test cases: the ci/ scenarios of every chart, their golden files, the pod templates of a manifest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlrecipe.helm.render import charts_root
from mlrecipe.helm.schemas import CATALOG

GOLDEN = Path(__file__).parent / "golden"
RELEASE, NAMESPACE = "demo", "ml"


def scenarios() -> list[tuple[str, Path]]:
    """Every (catalog name, ci values file)."""
    out = []
    for name in CATALOG:
        for path in sorted((charts_root() / name / "ci").glob("*-values.yaml")):
            out.append((name, path))
    return out


def golden_path(name: str, values_file: Path) -> Path:
    """Golden file of one scenario."""
    return GOLDEN / f"{name.replace('/', '__')}__{values_file.name.removesuffix('-values.yaml')}.yaml"


def pod_templates(node: Any) -> Iterator[dict[str, Any]]:
    """Every pod template (a mapping with ``metadata`` and a ``spec`` holding ``containers``) under ``node``."""
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and "containers" in spec and "metadata" in node:
            yield node
        for value in node.values():
            yield from pod_templates(value)
    elif isinstance(node, list):
        for item in node:
            yield from pod_templates(item)
