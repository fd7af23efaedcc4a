"""The pydantic base of every model read from a user's file: recipes, pipelines and the backends' options.

Unknown keys are errors (a typo never passes silently) and null values fall back to the field's default, as the
reference's values files leave keys empty (``nproc_per_node:``) to mean "the default".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class Model(BaseModel):
    """Base of every spec model and backend options model: unknown keys are errors and null values fall back
    to defaults."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data
