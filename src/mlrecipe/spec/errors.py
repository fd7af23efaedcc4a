"""Spec errors: every problem in a user's file, with the file, line and field path.

The classes live in :mod:`mlrecipe.errors` (one exceptions module); they are re-exported here for the
spec layer.
"""

from __future__ import annotations

from mlrecipe.errors import SpecError, SpecIssue

__all__ = ["SpecError", "SpecIssue", "format_path", "parse_path"]


def format_path(loc: tuple[str | int, ...]) -> str:
    """Format a location tuple as ``steps[1].recipe.resources.nnodes``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def parse_path(path: str) -> tuple[str | int, ...]:
    """The location tuple of a path that :func:`format_path` wrote (``resources.nnodes``, ``env[0].value``)."""
    loc: list[str | int] = []
    for part in path.replace("[", ".[").split("."):
        if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit():
            loc.append(int(part[1:-1]))
        elif part:
            loc.append(part)
    return tuple(loc)
