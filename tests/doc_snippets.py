"""Snippets of the docs marked runnable: an HTML comment on the line before a fence names their kind.

``<!-- runnable: pipeline -->``, ``<!-- runnable: recipe CHART -->``, ``<!-- runnable: config -->`` (validated by
``tests/unit/test_docs.py``) and ``<!-- runnable: shell -->`` (run by ``tests/integration/test_docs_shell.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").rglob("*.md")])
MARK = re.compile(r"<!-- runnable: (\w+)(?: (\S+))? -->")


@dataclass(frozen=True)
class Snippet:
    """One fenced block marked runnable: where it is, what kind, its argument and its text."""

    page: Path
    line: int
    kind: str
    argument: str | None
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def snippets(kind: str) -> list[Snippet]:
    """Every snippet of ``kind`` in the docs."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines[:-1]):
            mark = MARK.fullmatch(line.strip())
            if not mark or not lines[i + 1].startswith("```"):
                continue
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            if mark.group(1) == kind:
                found.append(Snippet(page, i + 2, kind, mark.group(2), "\n".join(lines[i + 2:end]) + "\n"))
    return found
