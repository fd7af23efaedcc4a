"""The recipe spec and the charts' values schemas accept the same keys.

Every ``ci/*-values.yaml`` scenario of every chart validates with ``mlrecipe validate --chart``, and
every property a chart's ``values.schema.json`` declares is a field of the spec models (so a recipe
that ``helm install`` accepts is never rejected by mlrecipe as an unknown key).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from mlrecipe.spec.catalog import CATALOG
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.load import load_step_release
from mlrecipe.spec.recipe import Recipe
from tests.repo import REPO

CHARTS = REPO / "charts" / "machine-learning"
SCENARIOS = sorted((c, f) for c in CATALOG for f in (CHARTS / c / "ci").glob("*.yaml"))


@pytest.mark.parametrize("chart,path", SCENARIOS, ids=[f"{c}:{p.name}" for c, p in SCENARIOS])
def test_chart_scenarios_validate_with_the_spec(chart: str, path: Path) -> None:
    """Render-only scenarios may leave the command empty: that is the one problem mlrecipe may report."""
    try:
        spec = load_step_release("ci", chart, [str(path)])
    except SpecError as exc:
        assert all("empty command" in i.message for i in exc.issues), str(exc)
        return
    assert spec.steps[0].chart.name == chart


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        out[info.alias or name] = info.annotation
        for choice in getattr(info.validation_alias, "choices", []) or []:
            out[str(choice)] = info.annotation
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    found = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _models_in(arg)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append(annotation)
    return found


def _missing(schema: dict[str, Any], model: type[BaseModel], path: str) -> list[str]:
    fields = _fields(model)
    out = []
    props = schema.get("properties", {})
    items = schema.get("items", {}).get("properties") if schema.get("type") == "array" else None
    for key, sub in (props or items or {}).items():
        if key not in fields:
            out.append(f"{path}.{key}")
            continue
        for nested in _models_in(fields[key]):
            out += _missing(sub, nested, f"{path}.{key}")
    return out


@pytest.mark.parametrize("chart", sorted(CATALOG))
def test_every_chart_key_is_a_spec_field(chart: str) -> None:
    schema = json.loads((CHARTS / chart / "values.schema.json").read_text())
    assert _missing(schema, Recipe, "values") == []
