"""Value overlays: Helm's merge rules for ``-f`` files, ``values:`` overrides and ``--set``."""

from __future__ import annotations

import copy
import re
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


#: ``key.sub=value`` with nothing Helm's parser reads specially (no list index, escape, separator or ``{a,b}`` list),
#: ASCII only (Helm folds case by Unicode rules: a long s, U+017F, in ``false`` still reads as false).
_PLAIN = re.compile(r"([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)=([\x20-\x7e]+)")
_PLAIN_VALUE_SPECIALS = frozenset(",\\{}[]")
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)
_INT64_DIGITS = 19  #: longer literals are strings to Helm, and past 4,300 digits Python's int() refuses them


def _plain_value(text: str) -> Any:
    """The value Helm's ``--set`` gives ``text`` (its ``typedVal``): true/false/null in any case, an int64 written
    without a leading zero, else the string (a number of any length: never read as a Python int past int64)."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    if (_INT.fullmatch(text) and (text == "0" or text[0] != "0") and len(text.lstrip("+-")) <= _INT64_DIGITS
            and int(text) in _INT64):
        return int(text)
    return text


def _plain_sets(expressions: list[str]) -> dict[str, Any] | None:
    """The values of ``expressions`` when each is a plain ``key.sub=value`` and no key is inside another one's
    value (``a=1`` with ``a.b=2``), as Helm's parser gives them; ``None`` for anything else, which Helm parses.
    Most ``--set`` and ``-B`` expressions are plain, and loading Helm's library costs about 0.08 s per command."""
    paths: dict[tuple[str, ...], Any] = {}
    for expr in expressions:
        match = _PLAIN.fullmatch(expr)
        if match is None or _PLAIN_VALUE_SPECIALS.intersection(match.group(2)):
            return None
        paths[tuple(match.group(1).split("."))] = _plain_value(match.group(2))
    if any(path[:n] in paths for path in paths for n in range(1, len(path))):
        return None
    values: dict[str, Any] = {}
    for path, value in sorted(paths.items()):  # Helm's maps come back with their keys sorted
        node = values
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return values


def parse_sets(expressions: list[str]) -> dict[str, Any]:
    """Parse ``--set key=value`` expressions as Helm's own parser (helm-python-sdk) does; plain ``key.sub=value``
    ones without loading it (:func:`_plain_sets`, checked against Helm's parser by the tests).

    As ``helm --set`` does, every expression is parsed into the same values, so that ``--set a[0].name=x --set
    a[0].value=y`` gives one list item with both keys (a later expression wins for the same key). An expression
    that Helm refuses, that sets nothing (``=1``) or that would swallow what follows it (an unclosed ``[``) raises
    :class:`SpecError` naming it: no expression is dropped silently.
    """
    if not expressions:
        return {}
    plain = _plain_sets(expressions)
    if plain is not None:
        return plain
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
    roots: dict[str, list[str]] = {}
    for expr in expressions:
        plain = _plain_sets([expr])
        if plain is None:
            from helm_python import parse_set_string

            plain = parse_set_string(expr)
        for key in plain:
            roots.setdefault(str(key), []).append(expr)
    return roots
