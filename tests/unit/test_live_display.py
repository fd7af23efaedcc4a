"""The live display shows the release's graph: every step from the start, what it needs and what it waits for."""

from __future__ import annotations

import io

from rich.console import Console

from mlrecipe.backends.base import StepOutcome, StepState
from mlrecipe.runner.progress import LiveDisplay


def screen(display: LiveDisplay) -> str:
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(display._table())
    return out.getvalue()


def row(text: str, step: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"│ {step} "))


def test_every_step_shows_from_the_start_with_what_it_waits_for() -> None:
    display = LiveDisplay(Console(file=io.StringIO(), width=160))
    needs = {"data": frozenset(), "train-lr-1": frozenset({"data"}), "train-lr-2": frozenset({"data"}),
             "eval": frozenset({"train-lr-1", "train-lr-2"})}
    display.graph([("data", "data-prep/data-process"), ("train-lr-1", "training/pytorchjob-elastic"),
                   ("train-lr-2", "training/pytorchjob-elastic"), ("eval", "data-prep/data-process")], needs)
    first = screen(display)
    assert "ready" in row(first, "data") and "pending" in row(first, "data")
    assert "waits for data" in row(first, "train-lr-1")
    assert "train-lr-1, train-lr-2" in row(first, "eval") and "waits for train-lr-1, train-lr-2" in row(first, "eval")

    display.step_finished("data", StepOutcome(StepState.SUCCEEDED, "done"), 3.0)
    display.step_started("train-lr-1", "training/pytorchjob-elastic", 2)
    display.step_started("train-lr-2", "training/pytorchjob-elastic", 2)
    display.step_finished("train-lr-1", StepOutcome(StepState.SUCCEEDED, ""), 12.0)
    later = screen(display)
    assert "succeeded" in row(later, "data") and "running" in row(later, "train-lr-2")
    assert "waits for train-lr-2" in row(later, "eval") and "train-lr-1," not in row(later, "eval").split("waits")[1]
    assert "data-prep/data-process" in row(later, "eval"), "a pending step shows its chart"


def test_a_skipped_step_keeps_its_chart() -> None:
    display = LiveDisplay(Console(file=io.StringIO(), width=160))
    display.graph([("data", "data-prep/data-process")], {"data": frozenset()})
    display.step_skipped("data", "unchanged since its last success; --force re-runs it")
    text = row(screen(display), "data")
    assert "skipped" in text and "data-prep/data-process" in text and "unchanged" in text
