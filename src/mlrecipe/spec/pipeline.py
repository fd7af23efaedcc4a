"""Pipeline models: a release made of ordered (or dependent) steps."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from mlrecipe.spec.recipe import Model

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class PipelineStep(Model):
    """One step: a chart, its recipe (path(s) or inline values) and value overrides."""

    name: str = Field(min_length=1, max_length=40, pattern=NAME_PATTERN)
    chart: str = Field(min_length=1)
    recipe: str | list[str] | dict[str, Any] | None = None
    values: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)

    @field_validator("depends_on", mode="before")
    @classmethod
    def _one_dependency(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class Pipeline(Model):
    """A pipeline file: ``release``, ``namespace``, ``backend`` and ``steps``."""

    release: str = Field(min_length=1, max_length=40, pattern=NAME_PATTERN)
    namespace: str = Field("default", min_length=1, max_length=63, pattern=NAME_PATTERN)
    backend: str | None = None
    description: str | None = None
    steps: list[PipelineStep] = Field(min_length=1)
