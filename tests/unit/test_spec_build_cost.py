"""What building the spec models' validators costs ``validate`` stays out of its way, checked on the models, not by a
clock (``benchmarks/bench_read_commands.py`` has the times).

No field of a recipe or pipeline model takes a builtin (``list``, ``dict``) as its ``default_factory``: pydantic reads
every factory's signature as it builds a validator, and a builtin's is parsed from its text signature with
``tokenize`` (about 6 ms of ``validate``); ``mlrecipe.spec.model.new_list`` and ``new_dict`` are the Python ones.
"""

from __future__ import annotations

import builtins

from mlrecipe.spec import pipeline, recipe
from mlrecipe.spec.model import Model


def _models() -> list[type[Model]]:
    found, todo = [], [Model]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return [m for m in found if m.__module__ in (recipe.__name__, pipeline.__name__)]


def test_no_spec_model_field_has_a_builtin_default_factory() -> None:
    models = _models()
    assert recipe.Recipe in models and pipeline.Pipeline in models
    builtin = [f"{m.__name__}.{name}" for m in models for name, info in m.model_fields.items()
               if getattr(info.default_factory, "__module__", None) == builtins.__name__]
    assert builtin == []
