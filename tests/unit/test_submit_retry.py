"""The runner's one retry rule for submissions (:mod:`mlrecipe.runner.submit_retry`): a transient error is asked
again after a bounded backoff, a permanent one is not; through the contract, for any backend (the fake one).
Nothing waits: the sleep is injected, or the backoff set to zero seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.cli.execute import run_inputs
from mlrecipe.errors import BackendError, ExitCode, TransientBackendError
from mlrecipe.runner import submit_retry
from mlrecipe.runner.submit_retry import SUBMIT_BACKOFF, submit_with_retry
from tests.unit.fake_backend import WORLD


class Flaky:
    """A submission that meets ``transient`` transient errors, then ``error`` if one is given, else succeeds."""

    def __init__(self, transient: int, error: BaseException | None = None) -> None:
        self.transient, self.error, self.calls = transient, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.transient:
            raise TransientBackendError(f"throttled ({self.calls})")
        if self.error is not None:
            raise self.error
        return "submitted"


def test_a_transient_error_is_retried_after_the_backoff() -> None:
    slept: list[float] = []
    flaky = Flaky(transient=2)
    assert submit_with_retry(flaky, sleep=slept.append) == "submitted"
    assert flaky.calls == 3 and slept == list(SUBMIT_BACKOFF)


def test_retries_are_bounded_and_the_last_transient_error_propagates() -> None:
    slept: list[float] = []
    flaky = Flaky(transient=10)
    with pytest.raises(TransientBackendError, match=r"throttled \(3\)"):
        submit_with_retry(flaky, sleep=slept.append)
    assert flaky.calls == len(SUBMIT_BACKOFF) + 1 and slept == list(SUBMIT_BACKOFF)
    assert sum(SUBMIT_BACKOFF) <= 10, "a submission gives up within seconds"


def test_a_permanent_error_is_not_retried() -> None:
    slept: list[float] = []
    refused = Flaky(transient=0, error=BackendError("quota exceeded"))
    with pytest.raises(BackendError, match="quota exceeded"):
        submit_with_retry(refused, sleep=slept.append)
    assert refused.calls == 1 and slept == []


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
