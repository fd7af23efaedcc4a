"""The results of a release's matrix steps: each combination with the metrics its step reported, ranked.

A step's metrics are the latest value of each name in its metrics file (:mod:`mlrecipe.metrics`), or, where the
backend keeps no local file, the progress its state record last saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlrecipe.backends.base import ReleaseContext, StepState
from mlrecipe.metrics import read_progress
from mlrecipe.runner.state import ReleaseRecord
from mlrecipe.spec.load import ReleaseSpec, StepSpec

if TYPE_CHECKING:
    from mlrecipe.runner.step_backends import AnyBackend


@dataclass
class SweepRow:
    """One combination: its step, state, values and metrics."""

    step: str
    state: str
    combination: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class SweepTable:
    """The combinations of one matrix step, best first when ``rank_by`` is set."""

    step: str  #: the pipeline step that carries the matrix
    keys: list[str]  #: its matrix keys, in the file's order
    rows: list[SweepRow]
    rank_by: str | None = None
    goal: str = "min"

    @property
    def metric_names(self) -> list[str]:
        """The ranking metric first, then every other metric some combination reported, sorted."""
        names = sorted({name for row in self.rows for name in row.metrics} - {self.rank_by})
        return ([self.rank_by] if self.rank_by else []) + names

    @property
    def ranked(self) -> bool:
        """Whether some combination reported the metric to rank by."""
        return self.rank_by is not None and any(self.rank_by in row.metrics for row in self.rows)


def _metrics(step: StepSpec, backend: AnyBackend, ctx: ReleaseContext,
             record: ReleaseRecord | None) -> dict[str, float]:
    progress = read_progress(backend.metrics_path(ctx, step.name))
    if progress is not None:
        return dict(progress.metrics)
    rec = record.steps.get(step.name) if record is not None else None
    return dict((rec.progress or {}).get("metrics") or {}) if rec is not None else {}


def rank(rows: list[SweepRow], metric: str | None, goal: str) -> list[SweepRow]:
    """``rows`` best first by ``metric`` (``goal`` min or max); rows without it (or with NaN) last, in order."""
    if metric is None:
        return list(rows)

    def key(row: SweepRow) -> tuple[int, float]:
        value = row.metrics.get(metric)
        if value is None or not math.isfinite(value):
            return (1, 0.0)
        return (0, value if goal == "min" else -value)

    return sorted(rows, key=key)


def sweep_tables(spec: ReleaseSpec, backend: AnyBackend, ctx: ReleaseContext,
                 record: ReleaseRecord | None) -> list[SweepTable]:
    """One table per matrix step of ``spec`` (none without a matrix), rows ranked by the pipeline's ``sweep``."""
    rank_by = spec.sweep.rank_by if spec.sweep is not None else None
    goal = spec.sweep.goal if spec.sweep is not None else "min"
    tables: dict[str, SweepTable] = {}
    for step in spec.steps:
        if step.matrix is None:
            continue
        table = tables.setdefault(step.matrix.step, SweepTable(step.matrix.step, [k for k, _ in step.matrix.values],
                                                                [], rank_by, goal))
        rec = record.steps.get(step.name) if record is not None else None
        state = rec.state.value if rec is not None else "pending"
        table.rows.append(SweepRow(step.name, state, step.matrix.as_dict(), _metrics(step, backend, ctx, record)))
    for table in tables.values():
        table.rows = rank(table.rows, rank_by, goal)
    return list(tables.values())


def unreported_rank_metric(spec: ReleaseSpec, tables: list[SweepTable]) -> str | None:
    """The error when every combination succeeded yet none reported the metric to rank by (a misspelt name, or
    one the steps do not report): ``file:line: sweep.rank_by: ...`` naming what they did report; else None."""
    if spec.sweep is None:
        return None
    for table in tables:
        if table.ranked or any(row.state != StepState.SUCCEEDED.value for row in table.rows):
            continue
        reported = sorted({name for row in table.rows for name in row.metrics})
        what = (f"they reported {', '.join(reported)}" if reported
                else "they reported no metric to $MLRECIPE_METRICS_FILE")
        return (f"{spec.sweep_at}: sweep.rank_by: unknown metric '{spec.sweep.rank_by}': no combination of step "
                f"{table.step} reported it ({what})")
    return None
