"""Printing doctor results: a rich table on a terminal, plain lines otherwise, or JSON."""

from __future__ import annotations

import json
from typing import TextIO

from mlrecipe.infra.doctor.base import Outcome, exit_code

MARKS = {"ok": "ok", "FAIL": "FAIL", "warn": "warn", "skip": "skip"}
STYLES = {"ok": "green", "FAIL": "bold red", "warn": "yellow", "skip": "dim"}


def summary(outcomes: list[Outcome]) -> str:
    """One line: counts, and whether a blocking check failed."""
    failed = sum(o.status == "FAIL" for o in outcomes)
    warned = sum(o.status == "warn" for o in outcomes)
    passed = sum(o.status == "ok" for o in outcomes)
    verdict = "blocking problems found" if failed else "ready"
    return f"{verdict}: {passed} passed, {failed} failed (blocking), {warned} warning(s), {len(outcomes)} checks"


def to_json(backend: str, outcomes: list[Outcome]) -> str:
    """The machine-readable report."""
    return json.dumps(
        {
            "backend": backend,
            "ok": exit_code(outcomes) == 0,
            "summary": summary(outcomes),
            "checks": [o.to_dict() for o in outcomes],
        },
        indent=2,
    )


def write_plain(backend: str, outcomes: list[Outcome], stream: TextIO) -> None:
    """Plain text, one check per line and the fix indented below a failure."""
    stream.write(f"mlrecipe doctor --backend {backend}\n")
    for o in outcomes:
        stream.write(f"[{MARKS[o.status]:>4}] {o.check.name}: {o.result.detail}\n")
        if o.status in ("FAIL", "warn") and o.result.fix_hint:
            stream.write(f"       fix: {o.result.fix_hint}\n")
    stream.write(summary(outcomes) + "\n")


def write_table(backend: str, outcomes: list[Outcome], stream: TextIO) -> None:
    """A rich table (for terminals)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"mlrecipe doctor --backend {backend}", show_lines=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("result")
    table.add_column("fix")
    for o in outcomes:
        fix = o.result.fix_hint if o.status in ("FAIL", "warn") else ""
        table.add_row(f"[{STYLES[o.status]}]{MARKS[o.status]}[/]", o.check.name, o.result.detail, fix)
    console = Console(file=stream)
    console.print(table)
    console.print(summary(outcomes))
