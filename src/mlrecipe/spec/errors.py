"""Spec errors: every problem in a user's file, with the file, line and field path."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecIssue:
    """One problem found in an input file."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f"{self.path}: " if self.path else ""
        return f"{where}: {field}{self.message}"


class SpecError(Exception):
    """Raised with all the issues of the inputs at once; the CLI prints them and exits 2."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))

    @classmethod
    def single(cls, file: str, message: str, line: int | None = None, path: str = "") -> SpecError:
        return cls([SpecIssue(file, line, path, message)])


def format_path(loc: tuple[str | int, ...]) -> str:
    """Format a location tuple as ``steps[1].recipe.resources.nnodes``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
