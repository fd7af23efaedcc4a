"""Progress of a release: a live table on a terminal, plain lines otherwise, nothing for JSON."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from mlrecipe.backends.base import StepOutcome, StepState
from mlrecipe.metrics import Progress

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

STYLES = {StepState.SUCCEEDED.value: "green", StepState.SERVING.value: "green", StepState.FAILED.value: "red",
          StepState.RUNNING.value: "cyan", StepState.SKIPPED.value: "dim", StepState.PENDING.value: "dim"}
#: States after which the steps that need a step may start.
DONE = {StepState.SUCCEEDED.value, StepState.SERVING.value, StepState.SKIPPED.value}


def _fmt_elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


class Display:
    """Receives the runner's events; the base class prints plain lines."""

    PROGRESS_EVERY = 15.0  #: seconds between two progress lines of one step

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self._shown: dict[str, tuple[float, str]] = {}
        self._noted: dict[str, float] = {}

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def graph(self, steps: Sequence[tuple[str, str]], needs: Mapping[str, frozenset[str]]) -> None:
        """The release's steps (name, chart) in order and what each waits for, before any starts; plain output
        prints nothing (each step says when it starts)."""

    def step_started(self, name: str, chart: str, nodes: int) -> None:
        self.say(f"==> step {name} ({chart}): starting {nodes} node(s)")

    def step_skipped(self, name: str, reason: str) -> None:
        self.say(f"==> step {name}: skipped ({reason})")

    def tick(self, name: str, elapsed: float, last_line: str, progress: Progress | None = None) -> None:
        """Every watch tick of a running step; plain output prints its progress every ``PROGRESS_EVERY`` s."""
        if progress is None or not str(progress):
            return
        when, text = self._shown.get(name, (-self.PROGRESS_EVERY, ""))
        if str(progress) != text and elapsed - when >= self.PROGRESS_EVERY:
            self._shown[name] = (elapsed, str(progress))
            self.say(f"    {name}: {progress}")

    def step_waiting(self, name: str, elapsed: float, why: str) -> None:
        """A running step makes no progress for a reason the backend gives (GPUs held elsewhere, pods pending);
        plain output prints it at once, then every ``PROGRESS_EVERY`` s."""
        if elapsed - self._noted.get(name, -self.PROGRESS_EVERY) >= self.PROGRESS_EVERY:
            self._noted[name] = elapsed
            self.say(f"    {name}: {why}")

    def step_finished(self, name: str, outcome: StepOutcome, elapsed: float) -> None:
        if outcome.state is StepState.SERVING:
            self.say(f"==> step {name}: serving, ready after {_fmt_elapsed(elapsed)} ({outcome.message})")
            return
        self.say(f"==> step {name}: {outcome.state} in {_fmt_elapsed(elapsed)}"
                 + (f" ({outcome.message})" if outcome.message else ""))
        if outcome.state is StepState.FAILED and outcome.log_tail:
            rank = outcome.failed_rank if outcome.failed_rank is not None else 0
            self.say(f"--- last lines of node {rank}'s log ---")
            for line in outcome.log_tail:
                self.say(f"    {line}")


class QuietDisplay(Display):
    """For ``--output json``: the caller prints one JSON document at the end."""

    def say(self, text: str) -> None:
        return None


class LiveDisplay(Display):
    """A rich live table of the release's graph: every step with what it waits for, its state, elapsed time and
    progress (else its rank-0 log line); a waiting step names the steps it still waits for."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        from rich.console import Console
        from rich.live import Live

        self.console = console or Console()
        self.rows: dict[str, list[str]] = {}
        self.needs: dict[str, frozenset[str]] = {}
        self.started: dict[str, float] = {}
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)

    def _state(self, name: str) -> str:
        return self.rows[name][1] if name in self.rows else StepState.PENDING.value

    def _needs_cell(self, name: str) -> str:
        from rich.markup import escape

        cells = []
        for dep in sorted(self.needs.get(name, ())):
            style = STYLES.get(self._state(dep), "")
            cells.append(f"[{style}]{escape(dep)}[/]" if style else escape(dep))
        return ", ".join(cells)

    def _table(self) -> Table:
        from rich.markup import escape
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", expand=True)
        table.add_column("step", no_wrap=True)
        table.add_column("needs", no_wrap=True, overflow="ellipsis", max_width=40)
        table.add_column("chart", no_wrap=True)
        table.add_column("state", no_wrap=True)
        table.add_column("elapsed", justify="right", no_wrap=True)
        table.add_column("progress (else rank 0's last line)", overflow="ellipsis", no_wrap=True, ratio=1)
        for name, (chart, state, elapsed, line) in self.rows.items():
            style = STYLES.get(state, "")
            if state == StepState.PENDING.value:
                left = sorted(d for d in self.needs.get(name, ()) if self._state(d) not in DONE)
                line = f"waits for {', '.join(left)}" if left else "ready"
            table.add_row(escape(name), self._needs_cell(name), escape(chart),
                          f"[{style}]{state}[/]" if style else state, elapsed, escape(line))
        return table

    def _refresh(self) -> None:
        self.live.update(self._table())

    def __enter__(self) -> LiveDisplay:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def say(self, text: str) -> None:
        self.live.console.print(text, markup=False, highlight=False)

    def graph(self, steps: Sequence[tuple[str, str]], needs: Mapping[str, frozenset[str]]) -> None:
        self.needs = dict(needs)
        for name, chart in steps:
            self.rows.setdefault(name, [chart, StepState.PENDING.value, "", ""])
        self._refresh()

    def step_started(self, name: str, chart: str, nodes: int) -> None:
        self.started[name] = time.monotonic()
        self.rows[name] = [chart, StepState.RUNNING.value, "0:00", ""]
        self._refresh()

    def step_skipped(self, name: str, reason: str) -> None:
        chart = self.rows.get(name, [""])[0]
        self.rows[name] = [chart, StepState.SKIPPED.value, "", reason]
        self._refresh()

    def step_waiting(self, name: str, elapsed: float, why: str) -> None:
        """The step's row already shows why it waits."""

    def tick(self, name: str, elapsed: float, last_line: str, progress: Progress | None = None) -> None:
        if name in self.rows:
            self.rows[name][2] = _fmt_elapsed(elapsed)
            self.rows[name][3] = (str(progress) if progress is not None else "") or last_line[-200:]
            self._refresh()

    def step_finished(self, name: str, outcome: StepOutcome, elapsed: float) -> None:
        chart = self.rows.get(name, [""])[0]
        self.rows[name] = [chart, outcome.state.value, _fmt_elapsed(elapsed), outcome.message]
        self._refresh()
        if outcome.state is StepState.SERVING:
            self.say(f"step {name}: {outcome.message}")
        if outcome.state is StepState.FAILED and outcome.log_tail:
            rank = outcome.failed_rank if outcome.failed_rank is not None else 0
            self.say(f"--- last lines of node {rank}'s log ---")
            for line in outcome.log_tail:
                self.say(f"    {line}")


def make_display(output: str) -> Display:
    """The display for ``--output`` (text|json) on this stdout."""
    if output == "json":
        return QuietDisplay()
    if sys.stdout.isatty():
        return LiveDisplay()
    return Display()
