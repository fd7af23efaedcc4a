"""A submitted Slurm step as the runner watches it: job state, and for serving steps, readiness."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import RunningStep, StepOutcome
from mlrecipe.backends.serving import Readiness, probe
from mlrecipe.backends.slurm import scontrol
from mlrecipe.backends.slurm.outcome import outcome_of, vanished
from mlrecipe.logtail import tail


def job_ids(handle: dict[str, Any]) -> list[str]:
    """The step's job and, in chain mode, the jobs queued after it."""
    first = [handle["job_id"]] if handle.get("job_id") else []
    return first + list(handle.get("chain") or [])


class SlurmRunningStep(RunningStep):
    """One submitted batch job (and, in chain mode, the jobs queued after it).

    A serving step (``readiness`` given) is ready once its job runs, its script has published the
    server's URL in ``url_file`` and ``GET`` on the health path answers 2xx; the readiness budget counts
    from the moment the job starts running (time in the queue is not counted). A server job that ends,
    whatever its exit status, is a failure.
    """

    def __init__(self, step_dir: Path, job_id: str, rest: list[str], conf: str | None, poll_seconds: float,
                 readiness: Readiness | None = None, url_file: Path | None = None) -> None:
        self.step_dir = step_dir
        self.job_id = job_id
        self.conf = conf
        self.poll_seconds = poll_seconds
        self.readiness = readiness
        self.url_file = url_file
        self.handle: dict[str, Any] = {"job_id": job_id, "chain": rest, "slurm_conf": conf}
        self._outcome: StepOutcome | None = None
        self._next = 0.0
        self._running_since: float | None = None
        self._url: str | None = None
        self._next_probe = 0.0

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None:
            return self._outcome
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.poll_seconds
        try:
            info = scontrol.show_job(self.job_id, self.conf)
        except scontrol.SlurmError:
            return None  # the controller may be busy; ask again at the next poll
        if info is None:
            self._outcome = vanished(self.job_id, self.step_dir)
        elif info.active:
            if self.readiness is not None:
                return self._server_deadline(info.state)
            return None
        else:
            self._outcome = outcome_of(info, self.step_dir)
            if self.readiness is not None and self._outcome.state == "succeeded":
                self._outcome = StepOutcome("failed", 0, f"Slurm job {self.job_id}: the server exited with status 0",
                                            0, tail(self.step_dir / "node-0.log"))
        if self._outcome.state != "succeeded":
            scontrol.scancel(self.handle["chain"], self.conf)
        return self._outcome

    def _server_deadline(self, state: str) -> StepOutcome | None:
        assert self.readiness is not None
        if state != "RUNNING":
            self._running_since = None
            return None
        now = time.monotonic()
        if self._running_since is None:
            self._running_since = now
        waited = now - self._running_since
        if waited <= self.readiness.timeout or self.ready_url() is not None:
            return None
        scontrol.scancel(job_ids(self.handle), self.conf)
        where = self.readiness.health_url(self._published_url() or "http://<node>:<port>")
        self._outcome = StepOutcome(
            "failed", None, f"Slurm job {self.job_id}: the server was not ready after {waited:.0f} s of running "
            f"(GET {where}; raise server.startup_probe to wait longer)", 0, tail(self.step_dir / "node-0.log"))
        return self._outcome

    def _published_url(self) -> str | None:
        if self.url_file is None:
            return None
        try:
            return self.url_file.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def ready_url(self) -> str | None:
        """The server's URL once its job runs and its health path answers 2xx (probed at most once a period)."""
        if self.readiness is None or self._outcome is not None or self._running_since is None:
            return None
        if self._url is not None:
            return self._url
        now = time.monotonic()
        if now < self._next_probe:
            return None
        self._next_probe = now + self.readiness.period
        url = self._published_url()
        if url is not None and probe(self.readiness.health_url(url)):
            self._url = url
            self.handle["server"] = {"url": url}
        return self._url

    def cancel(self) -> None:
        scontrol.scancel(job_ids(self.handle), self.conf)
