"""Env entries whose name :mod:`mlrecipe.credentials` cannot call a credential or not (``ROUTER_KEY``): refused at
the recipe's file and line, with the way out, before any backend writes them anywhere."""

from __future__ import annotations

from typing import Any

from mlrecipe.credentials import ambiguity
from mlrecipe.errors import SpecIssue
from mlrecipe.spec.issues import ValueSources

Loc = tuple[str | int, ...]


def _entries(node: Any, loc: Loc) -> list[tuple[Loc, str]]:
    """(location of the name, name) of every ``{name, value}`` entry with a value, anywhere in ``node``."""
    out: list[tuple[Loc, str]] = []
    if isinstance(node, dict):
        name, value = node.get("name"), node.get("value")
        if isinstance(name, str) and value not in (None, "", [], {}):
            out.append(((*loc, "name"), name))
        for key, item in node.items():
            out += _entries(item, (*loc, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            out += _entries(item, (*loc, i))
    return out


def ambiguous_env_issues(values: dict[str, Any], sources: ValueSources) -> list[SpecIssue]:
    """One issue per env entry of ``values`` whose name is ambiguous (see :func:`mlrecipe.credentials.ambiguity`)."""
    return [SpecIssue(*sources.locate(loc), why) for loc, name in _entries(values, ()) if (why := ambiguity(name))]
