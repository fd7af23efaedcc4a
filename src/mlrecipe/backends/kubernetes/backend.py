"""The Kubernetes backend: each step is one Helm release ``<release>-<step>`` of its rendered chart.

``plan()`` renders the step's chart with Helm's own engine; ``submit()`` installs exactly those
manifests; ``poll()`` reads the workload's own status and the pods' reasons; logs of rank N are
copied to ``<step dir>/rank-N.log``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import Backend, Plan, ReleaseContext, RunningStep, StepOutcome
from mlrecipe.backends.kubernetes import cluster, status
from mlrecipe.backends.kubernetes.plan import KubernetesPlan, render_step
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec


class KubernetesBackend(Backend):
    """Runs steps as Helm releases on a Kubernetes cluster; see the module docstring."""

    name = "kubernetes"
    kinds = frozenset(StepKind)

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> KubernetesPlan:
        return render_step(step, ctx)

    def submit(self, plan: Plan, ctx: ReleaseContext) -> KubernetesRunningStep:
        assert isinstance(plan, KubernetesPlan)
        workload = plan.workload() or {}
        labels = (workload.get("metadata") or {}).get("labels") or {}
        selector = f"app.kubernetes.io/instance={plan.release}"
        if labels.get("mlrecipe.io/step"):
            selector += f",mlrecipe.io/step={labels['mlrecipe.io/step']}"
        handle = {
            "helm_release": plan.helm_release,
            "namespace": plan.namespace,
            "release": plan.release,
            "kind": workload.get("kind"),
            "name": (workload.get("metadata") or {}).get("name"),
            "selector": selector,
            "url": plan.service_url(),
        }
        running = KubernetesRunningStep(handle, ctx.options, ctx.step_dir(plan.step))
        try:
            cluster.install(plan, ctx.options)
        except Exception as exc:
            running.fail(f"helm install {plan.helm_release} in {plan.namespace} failed: {exc}")
        return running

    def cancel_handle(self, handle: dict[str, Any]) -> None:
        cluster.uninstall(handle["helm_release"], handle["namespace"], {})

    def handle_alive(self, handle: dict[str, Any]) -> bool:
        if not handle.get("kind"):
            return False
        obj = cluster.get_object(handle["kind"], handle["name"], handle["namespace"], {})
        return obj is not None and status.workload_outcome(obj) is None

    def log_path(self, ctx: ReleaseContext, step: str, rank: int = 0) -> Path:
        """Where the log streamed from the pod of ``rank`` is written."""
        return ctx.step_dir(step) / f"rank-{rank}.log"


DEFAULT_STUCK_TIMEOUT = 600.0


class KubernetesRunningStep(RunningStep):
    """A step installed on the cluster, watched through its workload object and pods."""

    def __init__(self, handle: dict[str, Any], options: dict[str, Any], step_dir: Path) -> None:
        self.handle = handle
        self.options = options
        self.step_dir = step_dir
        self._outcome: StepOutcome | None = None
        self._stuck = ""
        self._last: dict[str, Any] | None = None
        self._stuck_since: float | None = None
        self.stuck_timeout = float(options.get("stuck_timeout", DEFAULT_STUCK_TIMEOUT))

    def fail(self, message: str) -> None:
        """End the step before anything ran (the install was refused)."""
        self._outcome = StepOutcome("failed", None, message)

    def _pods(self) -> list[dict[str, Any]]:
        return cluster.list_pods(self.handle["namespace"], self.handle["selector"], self.options)

    def _copy_logs(self, pods: list[dict[str, Any]]) -> None:
        self.step_dir.mkdir(parents=True, exist_ok=True)
        for i, pod in enumerate(pods):
            rank = status.pod_rank(pod)
            name = pod["metadata"]["name"]
            text = cluster.pod_log(name, self.handle["namespace"], self.options)
            if text:
                (self.step_dir / f"rank-{rank if rank is not None else i}.log").write_text(text, encoding="utf-8")

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None or not self.handle.get("kind"):
            return self._outcome
        obj = cluster.get_object(self.handle["kind"], self.handle["name"], self.handle["namespace"], self.options)
        self._last = obj
        if obj is None:
            return None
        pods = self._pods()
        self._copy_logs(pods)
        self._outcome = status.step_outcome(obj, pods)
        if self._outcome is None:
            self._outcome = self._check_stuck(status.stuck_reason(pods))
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
        self.cancel()
        return StepOutcome("failed", None, f"stuck for {now - self._stuck_since:.0f} s: {reason}")

    def ready_url(self) -> str | None:
        """For a serving workload (Deployment, LeaderWorkerSet, RayService): its Service URL once ready."""
        if self._outcome is not None or self._last is None or not status.server_ready(self._last):
            return None
        return self.handle.get("url") or f"{self.handle['kind']}/{self.handle['name']}"

    def progress_note(self) -> str:
        return f"waiting: {self._stuck}" if self._stuck else ""

    def cancel(self) -> None:
        cluster.uninstall(self.handle["helm_release"], self.handle["namespace"], self.options)
