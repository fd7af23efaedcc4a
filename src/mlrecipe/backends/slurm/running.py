"""A submitted Slurm step as the runner watches it: job state, and for serving steps, readiness."""

from __future__ import annotations

import contextlib
from pathlib import Path

from mlrecipe.backends.base import PollClock, RunningStep, StepOutcome, StepState
from mlrecipe.backends.host.serving import Readiness, ReadinessWatcher
from mlrecipe.backends.slurm import remote, scontrol
from mlrecipe.backends.slurm.handle import SlurmHandle, SlurmServer
from mlrecipe.backends.slurm.outcome import outcome_of, vanished
from mlrecipe.backends.slurm.transport import SshTransport
from mlrecipe.errors import BackendError
from mlrecipe.logtail import tail


class LogMirror:
    """Over SSH: appends to the local step directory what the job's logs gained on the login node."""

    def __init__(self, transport: SshTransport, remote_dir: str, local_dir: Path, names: list[str]) -> None:
        self.transport, self.remote_dir, self.local_dir, self.names = transport, remote_dir, local_dir, names

    @classmethod
    def of(cls, handle: SlurmHandle, step_dir: Path, nnodes: int) -> LogMirror | None:
        """The mirror of a step submitted over SSH (``None`` for a local one)."""
        if handle.ssh is None or handle.remote_dir is None:
            return None
        names = ["batch.log", *(f"node-{r}.log" for r in range(nnodes)), "metrics.jsonl", "server.url"]
        return cls(SshTransport(handle.ssh, handle.slurm_conf), handle.remote_dir, step_dir, names)

    def sync(self) -> None:
        remote.mirror_logs(self.transport, self.remote_dir, self.local_dir, self.names)


class SlurmRunningStep(RunningStep[SlurmHandle]):
    """One submitted batch job (and, in chain mode, the jobs queued after it).

    A serving step (``readiness`` given) is ready once its job runs, its script has published the
    server's URL in ``url_file`` and ``GET`` on the health path answers 2xx; the readiness budget counts
    from the moment the job starts running (time in the queue is not counted). A server job that ends,
    whatever its exit status, is a failure. ``scontrol`` failures while polling raise
    :class:`~mlrecipe.errors.TransientBackendError` (the runner asks again), as does a dropped SSH connection.
    Over SSH, ``mirror`` copies the logs back at each poll (and once more when the job has ended).
    """

    def __init__(self, step_dir: Path, handle: SlurmHandle, poll_seconds: float,
                 readiness: Readiness | None = None, url_file: Path | None = None,
                 mirror: LogMirror | None = None) -> None:
        self.step_dir = step_dir
        self.mirror = mirror
        self.handle = handle
        self.clock = PollClock(poll_seconds)
        self.url_file = url_file
        self.watcher = ReadinessWatcher(readiness) if readiness is not None else None
        self._outcome: StepOutcome | None = None

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None:
            return self._outcome
        if not self.clock.due():
            return None
        info = scontrol.show_job(self.handle.job_id, self.handle.slurm_conf, self.handle.ssh)
        if self.mirror is not None:
            self.mirror.sync()
        if info is None:
            self._outcome = vanished(self.handle.job_id, self.step_dir)
        elif info.active:
            return self._server_deadline(info.step_state) if self.watcher is not None else None
        else:
            self._outcome = outcome_of(info, self.step_dir)
            if self.watcher is not None and self._outcome.state is StepState.SUCCEEDED:
                self._outcome = StepOutcome(
                    StepState.FAILED, 0, f"Slurm job {self.handle.job_id}: the server exited with status 0", 0,
                    tail(self.step_dir / "node-0.log"))
        if self._outcome.state is not StepState.SUCCEEDED:
            self._cancel_quietly(self.handle.chain)
        return self._outcome

    def _cancel_quietly(self, job_ids: list[str]) -> None:
        with contextlib.suppress(BackendError):  # the step's own outcome is what the user needs to see
            scontrol.scancel(job_ids, self.handle.slurm_conf, self.handle.ssh)

    def _server_deadline(self, state: StepState) -> StepOutcome | None:
        assert self.watcher is not None
        if state is not StepState.RUNNING:
            self.watcher.stop_clock()
            return None
        self.watcher.start_clock()
        waited = self.watcher.overdue(self._published_url())
        if waited is None:
            return None
        if self.keep_on_failure:  # the job, its allocation and its server stay for inspection
            self._cancel_quietly(self.handle.chain)
            self.kept = f"Slurm job {self.handle.job_id} (its allocation and the server's processes)"
        else:
            self._cancel_quietly(self.handle.job_ids)
        where = self.watcher.readiness.health_url(self._published_url() or "http://<node>:<port>")
        self._outcome = StepOutcome(
            StepState.FAILED, None, f"Slurm job {self.handle.job_id}: the server was not ready after {waited:.0f} s "
            f"of running (GET {where}; raise server.startup_probe to wait longer)", 0,
            tail(self.step_dir / "node-0.log"))
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
        if self.watcher is None or self._outcome is not None:
            return None
        url = self.watcher.check(self._published_url())
        if url is not None and self.handle.server is None:
            self.handle.server = SlurmServer(url=url)
        return url

    def cancel(self) -> None:
        scontrol.scancel(self.handle.job_ids, self.handle.slurm_conf, self.handle.ssh)
