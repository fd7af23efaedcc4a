"""Value overlays: Helm's merge rules for ``-f`` files, ``values:`` overrides and ``--set``."""

from __future__ import annotations

import copy
from typing import Any

from mlrecipe.spec.errors import SpecError, SpecIssue


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Merge ``overlay`` onto ``base`` as Helm does: maps merge recursively, other values replace."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_sets(expressions: list[str]) -> dict[str, Any]:
    """Parse ``--set key=value`` expressions with Helm's own parser (helm-python-sdk).

    As ``helm --set`` does, every expression is parsed into the same values, so that ``--set a[0].name=x --set
    a[0].value=y`` gives one list item with both keys (a later expression wins for the same key).
    """
    if not expressions:
        return {}
    from helm_python import HelmError, parse_set_string

    try:
        return parse_set_string(",".join(expressions))
    except HelmError:
        pass
    issues: list[SpecIssue] = []
    for expr in expressions:  # which ones Helm refuses, each with its own message
        try:
            parse_set_string(expr)
        except HelmError as exc:
            issues.append(SpecIssue("--set", None, expr, f"cannot parse: {exc}"))
    raise SpecError(issues or [SpecIssue("--set", None, " ".join(expressions), "cannot parse")])
