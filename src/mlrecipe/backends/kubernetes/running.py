"""A step installed on the cluster, as the runner watches it: its workload object and pods."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import PollClock, RunningStep, StepOutcome, StepState
from mlrecipe.backends.kubernetes import status
from mlrecipe.backends.kubernetes.cluster import KubeClient
from mlrecipe.backends.kubernetes.handle import KubernetesHandle
from mlrecipe.metrics import METRICS_FILE


class KubernetesRunningStep(RunningStep[KubernetesHandle]):
    """Polls the workload (at most once per ``poll_seconds``), copies pod logs and the tail of the step's metrics
    file (read in a running pod from the shared volume) into the step's directory, and fails a step whose pods
    cannot start for ``stuck_timeout`` seconds (uninstalling it)."""

    def __init__(self, handle: KubernetesHandle, client: KubeClient, step_dir: Path, stuck_timeout: float,
                 poll_seconds: float = 0.0) -> None:
        self.handle = handle
        self.client = client
        self.step_dir = step_dir
        self.stuck_timeout = stuck_timeout
        self._outcome: StepOutcome | None = None
        self._stuck = ""
        self._last: dict[str, Any] | None = None
        self._stuck_since: float | None = None
        self._clock = PollClock(poll_seconds)

    def _copy_logs(self, pods: list[dict[str, Any]]) -> None:
        self.step_dir.mkdir(parents=True, exist_ok=True)
        for i, pod in enumerate(pods):
            rank = status.pod_rank(pod)
            text = self.client.pod_log(pod["metadata"]["name"], self.handle.namespace)
            if text:
                (self.step_dir / f"rank-{rank if rank is not None else i}.log").write_text(text, encoding="utf-8")

    def _copy_metrics(self, pods: list[dict[str, Any]]) -> None:
        """The tail of the metrics file, read in the running pod of the lowest rank (the file is on a volume
        every pod of the step mounts)."""
        path = self.handle.metrics_file
        running = [p for p in pods if status.pod_state(p) is StepState.RUNNING]
        if not path or not running:
            return
        ranks = [status.pod_rank(p) for p in running]
        pod = min(zip(ranks, running, strict=True), key=lambda rp: (rp[0] is None, rp[0] or 0))[1]
        text = self.client.pod_file_tail(pod["metadata"]["name"], self.handle.namespace, path)
        if text:
            (self.step_dir / METRICS_FILE).write_text(text, encoding="utf-8")

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None or not self.handle.kind or not self.handle.name:
            return self._outcome
        if not self._clock.due():
            return None
        obj = self.client.get_object(self.handle.kind, self.handle.name, self.handle.namespace)
        self._last = obj
        if obj is None:
            return None
        pods = self.client.list_pods(self.handle.namespace, self.handle.selector)
        self._copy_logs(pods)
        self._copy_metrics(pods)
        self._outcome = status.step_outcome(obj, pods)
        if self._outcome is None:
            self._outcome = self._check_stuck(status.stuck_reason(pods))
        if self._outcome is not None and self._outcome.state is StepState.FAILED and self.keep_on_failure:
            self.kept = (f"Helm release {self.handle.helm_release} in namespace {self.handle.namespace} (its "
                         f"{self.handle.kind} and the pods its operator left)")
        return self._outcome

    def _check_stuck(self, reason: str) -> StepOutcome | None:
        """Remember why pods cannot start; fail the step once that lasts ``stuck_timeout`` seconds."""
        now = time.monotonic()
        if not reason:
            self._stuck, self._stuck_since = "", None
            return None
        if self._stuck_since is None:
            self._stuck_since = now
        self._stuck = reason
        if now - self._stuck_since < self.stuck_timeout:
            return None
        if not self.keep_on_failure:
            self.cancel()
        return StepOutcome(StepState.FAILED, None, f"stuck for {now - self._stuck_since:.0f} s: {reason}")

    def ready_url(self) -> str | None:
        """For a serving workload (Deployment, LeaderWorkerSet, RayService): its Service URL once ready."""
        if self._outcome is not None or self._last is None or not status.server_ready(self._last):
            return None
        return self.handle.url or f"{self.handle.kind}/{self.handle.name}"

    def progress_note(self) -> str:
        return f"waiting: {self._stuck}" if self._stuck else ""

    def cancel(self) -> None:
        self.client.uninstall(self.handle.helm_release, self.handle.namespace)
        for name in self.handle.secrets:
            self.client.delete_secret(name, self.handle.namespace)
