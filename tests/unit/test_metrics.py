"""The progress contract: rank 0 appends JSON lines to $MLRECIPE_METRICS_FILE; mlrecipe reads step, rate, ETA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlrecipe.metrics import METRICS_VAR, Progress, read_progress, report


def test_report_writes_on_rank_zero_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    report(1, 10, loss=2.0)  # no variable: nothing, no error
    monkeypatch.setenv(METRICS_VAR, str(path))
    monkeypatch.setenv("RANK", "1")
    report(1, 10, loss=2.0)
    assert not path.exists()
    monkeypatch.setenv("RANK", "0")
    report(2, 10, loss=1.5, lr=1e-3, note="text is dropped", bad=float("nan"))
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert record["step"] == 2 and record["total"] == 10 and record["metrics"] == {"loss": 1.5, "lr": 1e-3}


def test_rate_eta_and_latest_metrics(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [{"time": 100.0 + i, "step": 10 * i, "total": 100, "metrics": {"loss": 5.0 - i}} for i in range(5)]
    lines.append({"time": 104.5, "metrics": {"eval_loss": 3.3}})
    path.write_text("garbage\n" + "\n".join(json.dumps(x) for x in lines) + '\n{"time": 1')
    progress = read_progress(path)
    assert progress is not None
    assert (progress.step, progress.total, progress.rate) == (40, 100, 10.0)
    assert progress.eta == 6.0 and progress.metrics == {"loss": 1.0, "eval_loss": 3.3}
    assert str(progress) == "step 40/100  10.0/s  ETA 0:06  loss 1  eval_loss 3.3"
    assert Progress(**progress.to_json()) == progress
    assert read_progress(tmp_path / "missing.jsonl") is None and read_progress(None) is None
