"""What the config file (``$MLRECIPE_HOME/config.yaml``) gives every step that does not set it: a top-level
``watchdog:`` block (hang detection, docs/operating.md), validated as the recipe's and reported at the config
file's line."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mlrecipe.config import read_config
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.issues import ValueSources, pydantic_issues
from mlrecipe.spec.recipe import Watchdog

#: The config file's top-level keys that are step defaults (the others are backend sections).
STEP_DEFAULT_KEYS = ("watchdog",)


def config_step_defaults() -> dict[str, Any]:
    """The recipe values the config file sets for every step (``{}`` without a config file or such keys);
    :class:`SpecError` at the config file's line when one is invalid."""
    doc = read_config()
    if doc is None or not isinstance(doc.data, dict) or doc.data.get("watchdog") is None:
        return {}
    raw = doc.data["watchdog"]
    if not isinstance(raw, dict):
        raise SpecError.single(doc.file, "must be a mapping {hang_timeout, on_hang, max_restarts}",
                               doc.line_of(("watchdog",)), "watchdog")
    sources = ValueSources()
    sources.entries.append((doc, ("watchdog",), "watchdog"))
    try:
        Watchdog.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(pydantic_issues(exc, raw, sources)) from None
    return {"watchdog": raw}
