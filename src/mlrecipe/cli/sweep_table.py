"""The table printed at the end of a run with matrix steps: every combination with the metrics it reported."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from mlrecipe.errors import ExitCode
from mlrecipe.runner.sweep import SweepTable

if TYPE_CHECKING:
    from mlrecipe.runner.release import ReleaseRunner
    from mlrecipe.runner.state import ReleaseRecord


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def render(table: SweepTable, stream: TextIO | None = None) -> None:
    """Print one matrix step's combinations as a rich table (plain characters when not on a terminal)."""
    from rich.console import Console
    from rich.table import Table

    if table.rank_by is None:
        title = f"sweep {table.step}: {len(table.rows)} combination(s)"
    elif table.ranked:
        title = f"sweep {table.step}: best first by {table.rank_by} ({table.goal})"
    else:
        title = f"sweep {table.step}: no combination reported {table.rank_by}, so none is ranked"
    out = Table(title=title, title_justify="left", header_style="bold")
    out.add_column("#", justify="right")
    out.add_column("step", no_wrap=True)
    for key in table.keys:
        out.add_column(key)
    for name in table.metric_names:
        out.add_column(name, justify="right")
    out.add_column("state")
    for position, row in enumerate(table.rows, 1):
        shown = str(position) if table.ranked and table.rank_by in row.metrics else "-"
        out.add_row(shown, row.step, *(_cell(row.combination.get(k)) for k in table.keys),
                    *(_cell(row.metrics[m]) if m in row.metrics else "-" for m in table.metric_names), row.state)
    console = Console(file=stream, highlight=False, soft_wrap=False)
    if not console.is_terminal:  # a log file or a pipe: whole values rather than a table cut to 80 columns
        console = Console(file=stream, highlight=False, soft_wrap=False, width=200)
    console.print(out)


def tables(runner: ReleaseRunner, record: ReleaseRecord | None = None) -> list[SweepTable]:
    """The sweep tables of ``runner``'s release after a run (none without a matrix step), from ``record`` (default:
    the release's record, loaded)."""
    if not any(step.matrix is not None for step in runner.spec.steps):
        return []
    from mlrecipe.runner.state import load_record
    from mlrecipe.runner.sweep import sweep_tables

    ctx = runner.context
    record = record or load_record(runner.backend.name, ctx.namespace, ctx.release)
    return sweep_tables(runner.spec, runner.backend, ctx, record)


def as_json(table: SweepTable) -> dict[str, Any]:
    """One table for ``-o json``: the ranking and the rows best first, each with its ``rank`` (None: unranked)."""
    rows = []
    for position, row in enumerate(table.rows, 1):
        ranked = table.ranked and table.rank_by in row.metrics
        rows.append({"rank": position if ranked else None, "step": row.step, "state": row.state,
                     "matrix": row.combination, "metrics": row.metrics})
    return {"step": table.step, "keys": table.keys, "rank_by": table.rank_by, "goal": table.goal, "rows": rows}


def print_sweeps(runner: ReleaseRunner, code: ExitCode) -> ExitCode:
    """After a run: one table per matrix step of ``runner``'s release (nothing without a matrix); returns the
    run's exit code, or 2 when every combination succeeded but none reported the metric to rank by."""
    found = tables(runner)
    for table in found:
        render(table)
    return check_rank_metric(runner, found, code)


def check_rank_metric(runner: ReleaseRunner, found: list[SweepTable], code: ExitCode) -> ExitCode:
    """``code``, or :attr:`ExitCode.USAGE` with the error printed when the metric to rank by is unknown."""
    from mlrecipe.runner.sweep import unreported_rank_metric

    message = unreported_rank_metric(runner.spec, found) if code is ExitCode.OK else None
    if message is None:
        return code
    print(f"error: {message}", file=sys.stderr)
    return ExitCode.USAGE
