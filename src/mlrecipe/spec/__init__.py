"""Specs: pydantic models of recipes and pipelines, loaded with file/line/field errors (pure data)."""

from mlrecipe.spec.catalog import CATALOG, ChartInfo, StepKind, lookup
from mlrecipe.spec.errors import SpecError, SpecIssue
from mlrecipe.spec.load import ReleaseSpec, StepSpec, is_pipeline_file, load_pipeline, load_step_release
from mlrecipe.spec.recipe import Recipe

__all__ = [
    "CATALOG",
    "ChartInfo",
    "Recipe",
    "ReleaseSpec",
    "SpecError",
    "SpecIssue",
    "StepKind",
    "StepSpec",
    "is_pipeline_file",
    "load_pipeline",
    "load_step_release",
    "lookup",
]
