"""Every property of the recipe, pipeline and config-file JSON schemas (``mlrecipe schema
recipe|pipeline|config``) has a description, so editors show hover help for every key."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from mlrecipe.spec.pipeline import Pipeline
from mlrecipe.spec.recipe import Recipe

MODELS: dict[str, type[BaseModel]] = {"recipe": Recipe, "pipeline": Pipeline}


def undescribed(schema: dict[str, Any]) -> list[str]:
    """``where.property`` of every property without a description, in the schema and its ``$defs``."""
    missing: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{where}[{index}]")
            return
        if not isinstance(node, dict):
            return
        for name, prop in (node.get("properties") or {}).items():
            if not (isinstance(prop, dict) and str(prop.get("description") or "").strip()):
                missing.append(f"{where}.{name}")
        for key, value in node.items():
            if key == "$defs":
                for def_name, definition in value.items():
                    walk(definition, f"$defs.{def_name}")
            elif key == "properties":
                for name, prop in value.items():
                    walk(prop, f"{where}.{name}")
            elif isinstance(value, dict | list):
                walk(value, f"{where}.{key}" if key not in ("anyOf", "allOf", "oneOf", "items") else where)

    walk(schema, schema.get("title", "<root>"))
    return sorted(set(missing))


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("mode", ["validation", "serialization"])
def test_every_property_has_a_description(kind: str, mode: str) -> None:
    schema = MODELS[kind].model_json_schema(mode=mode)  # type: ignore[arg-type]
    assert schema.get("$defs"), "the nested models are walked too"
    missing = undescribed(schema)
    assert not missing, f"{len(missing)} {kind} schema properties without a description:\n  " + "\n  ".join(missing)


def test_every_config_file_property_has_a_description() -> None:
    from mlrecipe.backends.config_schema import config_schema

    schema = config_schema()
    assert set(schema["properties"]) == {"local", "slurm", "kubernetes", "sagemaker", "watchdog"}
    missing = undescribed(schema)
    assert not missing, f"{len(missing)} config schema properties without a description:\n  " + "\n  ".join(missing)


def test_the_walk_finds_missing_descriptions() -> None:
    class Inner(BaseModel):
        bare: int = 0

    class Outer(BaseModel):
        inner: Inner = Inner()
        items: list[Inner] = []

    assert undescribed(Outer.model_json_schema()) == ["$defs.Inner.bare", "Outer.inner", "Outer.items"]
