"""The runner's one retry rule for submissions (:mod:`mlrecipe.runner.submit_retry`): a transient error is asked
again after a bounded backoff, a permanent one is not; through the contract, for any backend (the fake one). The
runner does not sleep through a backoff: the other steps are started and watched meanwhile. The backoffs here are
zero or a fraction of a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.cli.execute import run_inputs
from mlrecipe.errors import ExitCode
from mlrecipe.runner import submit_retry
from mlrecipe.runner.submit_retry import SUBMIT_BACKOFF
from tests.unit.fake_backend import WORLD


def test_the_backoff_is_bounded_then_the_tries_are_spent() -> None:
    assert [submit_retry.retry_delay(n) for n in range(1, len(SUBMIT_BACKOFF) + 2)] == [*SUBMIT_BACKOFF, None]
    assert submit_retry.retry_delay(0) is None
    assert sum(SUBMIT_BACKOFF) <= 10, "a submission gives up within seconds"


def _run(tmp_path: Path, **commands: str) -> ExitCode:
    """Run a pipeline on the fake backend whose steps (in order) run the given commands."""
    lines = ["release: rel", "steps:"]
    for name, command in commands.items():
        lines += [f"  - name: {name}", "    chart: data-prep/data-process", "    values:", "      pvc: []",
                  f"      process: {{command: [{command}]}}"]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return run_inputs({"kind": "pipeline", "path": str(path), "sets": []}, "fake", [], False, False, "text")


@pytest.mark.usefixtures("fake_backend")
def test_the_runner_retries_any_backends_transient_submission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(submit_retry, "SUBMIT_BACKOFF", (0.0, 0.0))
    assert _run(tmp_path, busy="busy", refuse="refuse") == ExitCode.FAILED
    assert WORLD.tries == {"busy": 3, "refuse": 1}, "busy is taken at its third try; a refusal is not retried"
    assert "step busy: succeeded" in capsys.readouterr().out
    assert _run(tmp_path, down="down") == ExitCode.FAILED
    assert WORLD.tries["down"] == 3
    assert "step down: failed in 0:00 (submission failed: the fake cluster is busy" in capsys.readouterr().out


@pytest.mark.usefixtures("fake_backend")
def test_a_step_waiting_out_its_backoff_does_not_hold_up_the_others(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two independent steps: while ``busy`` waits for its second try, ``other`` is submitted (the runner slept
    through the backoff before, and started nothing else)."""
    monkeypatch.setattr(submit_retry, "SUBMIT_BACKOFF", (0.05, 0.05))
    path = tmp_path / "pipeline.yaml"
    path.write_text("release: rel\nsteps:\n"
                    "  - {name: busy, chart: data-prep/data-process, values: {pvc: [], process: {command: [busy]}}}\n"
                    "  - {name: other, chart: data-prep/data-process, depends_on: [],\n"
                    "     values: {pvc: [], process: {command: [ok]}}}\n")
    assert run_inputs({"kind": "pipeline", "path": str(path), "sets": []}, "fake", [], False, False,
                      "text") == ExitCode.OK
    assert WORLD.calls[:2] == ["busy", "other"] and WORLD.calls.count("busy") == 3, WORLD.calls
