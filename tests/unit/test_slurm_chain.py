"""Chain mode's attach-or-resubmit rule, against a recorded ``scontrol`` (no Slurm needed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.slurm import chain, scontrol
from mlrecipe.backends.slurm.backend import SlurmBackend
from mlrecipe.backends.slurm.options import SlurmOptions


def failed_job(job_id: str) -> scontrol.JobInfo:
    return scontrol.JobInfo(job_id, "FAILED", "NonZeroExitCode", 4, None, 0, "n1", {})


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[list[str]]]:
    """Job ids the backend submits (``"new-<n>"``) and the lists it cancels."""
    submitted: list[str] = []
    cancelled: list[list[str]] = []
    monkeypatch.setattr(scontrol, "show_job", lambda job_id, conf, ssh: failed_job(job_id))
    monkeypatch.setattr(scontrol, "scancel", lambda ids, conf, ssh: cancelled.append(list(ids)))

    def submit_one(self: SlurmBackend, plan: object, conf: object, extra: object = None) -> str:
        submitted.append(f"new-{len(submitted)}")
        return submitted[-1]

    monkeypatch.setattr(SlurmBackend, "_submit_one", submit_one)
    return submitted, cancelled


def context(tmp_path: Path) -> ReleaseContext:
    return ReleaseContext("chained", "default", "slurm", tmp_path, ("first", "second", "third"))


def plan_of(step: str) -> SimpleNamespace:
    return SimpleNamespace(step=step, digest=f"digest-{step}", readiness=None)


def test_a_job_this_driver_queued_that_failed_fast_is_attached_not_resubmitted(tmp_path, queued) -> None:
    """The runner reaches a chained step after its job already failed: the failure is the step's outcome."""
    backend = SlurmBackend(SlurmOptions(mode="chain"))
    ctx = context(tmp_path)
    chain.save(ctx, [chain.ChainEntry(s, f"old-{s}", f"digest-{s}", backend._run) for s in ctx.pipeline])
    assert backend._submit_chain(plan_of("second"), ctx, None) == ("old-second", ["old-third"])  # type: ignore[arg-type]
    assert queued == ([], [])


def test_a_failed_job_an_earlier_run_queued_is_submitted_again(tmp_path, queued) -> None:
    """``resume`` after a failure: the failed job and the tail queued after it are replaced."""
    backend = SlurmBackend(SlurmOptions(mode="chain"))
    ctx = context(tmp_path)
    chain.save(ctx, [chain.ChainEntry(s, f"old-{s}", f"digest-{s}", "an earlier run") for s in ctx.pipeline])
    job_id, rest = backend._submit_chain(plan_of("second"), ctx, None)  # type: ignore[arg-type]
    assert (job_id, rest) == ("new-0", [])
    assert queued == (["new-0"], [["old-second", "old-third"]])
    assert [(e.step, e.job_id, e.run) for e in chain.load(ctx)] == [("second", "new-0", backend._run)]
