"""The pydantic base of every model read from a user's file: recipes, pipelines and the backends' options.

Unknown keys are errors (a typo never passes silently) and null values fall back to the field's default, as the
reference's values files leave keys empty (``nproc_per_node:``) to mean "the default".

Each model builds its validator when first used (``defer_build``), not when its module is imported: a command
that validates a recipe builds the recipe's validator once (its nested models inside it), not one more for each
nested model and each backend's options it never uses. The CLI and the runner use the models from one thread; a
first use from several threads at once is safe with a pydantic that rebuilds under its lock (2.14.4 here does).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


def new_list() -> list[Any]:
    """An empty list, the ``default_factory`` of a list field.

    A Python function rather than the builtin ``list``: pydantic reads each factory's signature when it builds a
    validator, and a builtin's is parsed from its text signature with ``tokenize`` (about 6 ms of ``validate``).
    """
    return []


def new_dict() -> dict[str, Any]:
    """An empty dict, the ``default_factory`` of a mapping field (see :func:`new_list`)."""
    return {}


#: The prefixes a field may not take (pydantic 2.10's default; before 2.10 every ``model_`` name warned, and recipes
#: have ``model_data``, ``model_from``).
PROTECTED_NAMESPACES = ("model_validate", "model_dump")


class Model(BaseModel):
    """Base of every spec model and backend options model: unknown keys are errors and null values fall back
    to defaults."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False, defer_build=True,
                              protected_namespaces=PROTECTED_NAMESPACES)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data
