"""Chart test cases: the ci/ scenarios of every chart and their golden files."""

from __future__ import annotations

from pathlib import Path

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
