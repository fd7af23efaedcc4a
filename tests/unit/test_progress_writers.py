"""The two progress writers, ``mlrecipe.metrics.report`` (users' own scripts, ``mlrecipe.integrations``) and
``mlrecipe_scripts.core.progress.report_progress`` (every framework script), write the same lines for the same calls
under the same rank rule and variable; the framework scripts have no other writer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from mlrecipe import metrics
from mlrecipe_scripts.core import progress
from tests.repo import REPO


class _ScalarTensor:
    """What a one-element ``torch.Tensor`` looks like to the writers."""

    def __init__(self, value: float, elements: int = 1) -> None:
        self.value, self.elements = value, elements

    def item(self) -> float:
        return self.value

    def numel(self) -> int:
        return self.elements


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1, 10), {"loss": 2.0}),
    ((2, 10), {"loss": 1.5, "lr": 1e-3, "note": "text", "nan": float("nan"), "inf": float("inf"), "flag": True}),
    ((None, None), {"score": 1}),
    ((3, 0), {}),
    ((4, -1), {"tensor": _ScalarTensor(0.25), "many": _ScalarTensor(1.0, elements=3)}),
    ((5.0, 7.0), {"big": 10**6}),
    ((), {}),
]


def _lines(writer: Any, path: Path) -> list[str]:
    for args, kwargs in CALLS:
        writer(*args, **kwargs)
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def frozen_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1700000000.123456)


@pytest.mark.parametrize("rank", [None, "", "0", "1"])
def test_both_writers_write_the_same_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen_time: None,
                                           rank: str | None) -> None:
    assert metrics.METRICS_VAR == progress.METRICS_VAR == "MLRECIPE_METRICS_FILE"
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    written = {}
    for name, writer in (("mlrecipe", metrics.report), ("scripts", progress.report_progress)):
        path = tmp_path / f"{name}.jsonl"
        monkeypatch.setenv(metrics.METRICS_VAR, str(path))
        written[name] = _lines(writer, path)
    assert written["mlrecipe"] == written["scripts"]
    if rank == "1":
        assert written["scripts"] == []
        return
    assert written["scripts"] == [
        '{"time": 1700000000.123, "step": 1, "total": 10, "metrics": {"loss": 2.0}}',
        '{"time": 1700000000.123, "step": 2, "total": 10, "metrics": {"loss": 1.5, "lr": 0.001}}',
        '{"time": 1700000000.123, "metrics": {"score": 1.0}}',
        '{"time": 1700000000.123, "step": 3}',
        '{"time": 1700000000.123, "step": 4, "metrics": {"tensor": 0.25}}',
        '{"time": 1700000000.123, "step": 5, "total": 7, "metrics": {"big": 1000000.0}}',
        '{"time": 1700000000.123}',
    ]


@pytest.mark.parametrize("writer", [metrics.report, progress.report_progress], ids=["mlrecipe", "scripts"])
def test_no_variable_writes_nothing_and_a_failed_write_only_warns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], writer: Any) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv(metrics.METRICS_VAR, raising=False)
    writer(1, 2, loss=1.0)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(metrics.METRICS_VAR, str(tmp_path))  # a folder: the write fails
    writer(1, 2, loss=1.0)
    assert f"warning: cannot write MLRECIPE_METRICS_FILE={tmp_path}" in capsys.readouterr().err


def test_the_framework_scripts_have_one_writer() -> None:
    """Only ``core/progress.py`` names the variable: every script writes progress through it."""
    scripts = REPO / "src" / "mlrecipe_scripts"
    naming = sorted(str(path.relative_to(scripts)) for path in scripts.rglob("*.py")
                    if f'"{progress.METRICS_VAR}"' in path.read_text(encoding="utf-8"))
    assert naming == ["core/progress.py"]
