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


#: A key appended after an expression to see whether the expression lets Helm's parser read on: an unclosed ``[``
#: reads to the end of the string and silently drops itself and everything after it.
_PROBE = "mlrecipe-probe"


def parse_sets(expressions: list[str]) -> dict[str, Any]:
    """Parse ``--set key=value`` expressions with Helm's own parser (helm-python-sdk).

    As ``helm --set`` does, every expression is parsed into the same values, so that ``--set a[0].name=x --set
    a[0].value=y`` gives one list item with both keys (a later expression wins for the same key). An expression
    that Helm refuses, that sets nothing (``=1``) or that would swallow what follows it (an unclosed ``[``) raises
    :class:`SpecError` naming it: no expression is dropped silently.
    """
    if not expressions:
        return {}
    from helm_python import HelmError, parse_set_string

    issues: list[SpecIssue] = []
    for expr in expressions:
        try:
            alone = parse_set_string(expr)
            probed = parse_set_string(f"{expr},{_PROBE}=1")
        except HelmError as exc:
            issues.append(SpecIssue("--set", None, expr, f"cannot parse: {exc}"))
            continue
        if _PROBE not in probed:
            issues.append(SpecIssue("--set", None, expr, "cannot parse: it swallows what follows it (an unclosed "
                                    "'[' or a trailing '\\'; write key[0]=value)"))
        elif not alone:
            issues.append(SpecIssue("--set", None, expr, "sets nothing: write key=value (key.sub=value, key[0]=value)"))
    if issues:
        raise SpecError(issues)
    try:
        return parse_set_string(",".join(expressions))
    except HelmError as exc:  # each parses alone; together they disagree (a[0]=x then a.b=y)
        raise SpecError([SpecIssue("--set", None, " ".join(expressions), f"cannot parse: {exc}")]) from None


def set_roots(expressions: list[str]) -> dict[str, list[str]]:
    """The top-level keys the ``--set`` expressions set, each with the expressions that set it (after
    :func:`parse_sets` accepted them)."""
    if not expressions:
        return {}
    from helm_python import parse_set_string

    roots: dict[str, list[str]] = {}
    for expr in expressions:
        for key in parse_set_string(expr):
            roots.setdefault(str(key), []).append(expr)
    return roots
