"""What the harness says: notes (what it changed or left out), one line per workload, and for a failure the pod,
container, reason and the last lines of its log."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Outcome:
    """The end of one workload: success (or readiness, for servers) or the failure that ended it."""

    ok: bool
    workload: str  #: "Kind/name"
    summary: str
    pod: str | None = None
    container: str | None = None
    log_tail: str = ""
    hints: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = f"{'ok' if self.ok else 'FAILED'}: {self.workload}: {self.summary}"
        out = [head]
        if not self.ok and self.pod:
            out.append(f"  pod {self.pod}, container {self.container or '(none started)'}")
        out += [f"  {hint}" for hint in self.hints]
        if not self.ok and self.log_tail:
            out.append("  last lines of its log:")
            out += [f"    | {line}" for line in self.log_tail.splitlines()]
        return out


def print_report(notes: list[str], outcomes: list[Outcome], stream: TextIO = sys.stdout) -> None:
    for note in notes:
        stream.write(f"note: {note}\n")
    for outcome in outcomes:
        stream.write("\n".join(outcome.lines()) + "\n")
    stream.flush()
