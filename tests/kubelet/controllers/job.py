"""batch/v1 Job (Kubernetes 1.33 pkg/controller/job): ``completions`` pods to succeed, at most ``parallelism`` at a
time; ``completionMode: Indexed`` gives pod ``<job>-<index>-<suffix>`` the hostname ``<job>-<index>``, the
annotation and label ``batch.kubernetes.io/job-completion-index`` and ``JOB_COMPLETION_INDEX`` in every container;
more failed pods than ``backoffLimit`` (default 6) fail the Job (BackoffLimitExceeded). Simpler here: no backoff
delay between retries; with ``completions`` unset (a work queue) every one of ``parallelism`` pods must succeed."""

from __future__ import annotations

import copy
from typing import Any

from tests.kubelet.controllers import Controller, suffix
from tests.kubelet.pods import Pod
from tests.kubelet.report import Outcome

INDEX_KEY = "batch.kubernetes.io/job-completion-index"


class JobController(Controller):
    kind = "Job"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        spec = obj.get("spec") or {}
        self.parallelism = int(spec.get("parallelism", 1))
        self.completions = int(spec.get("completions") or self.parallelism)
        self.indexed = spec.get("completionMode") == "Indexed"
        self.backoff_limit = int(spec.get("backoffLimit", 6))
        self.pending = list(range(self.completions))
        self.succeeded: set[int] = set()
        self.by_pod: dict[str, int] = {}

    def _pod(self, index: int) -> Pod:
        template = copy.deepcopy(self.obj["spec"]["template"])
        labels = {"batch.kubernetes.io/job-name": self.name, "job-name": self.name}
        extra: dict[str, Any] = {}
        name = f"{self.name}-{suffix()}"
        if self.indexed:
            labels[INDEX_KEY] = str(index)
            template.setdefault("metadata", {}).setdefault("annotations", {})[INDEX_KEY] = str(index)
            for container in [*template["spec"].get("initContainers", []), *template["spec"]["containers"]]:
                container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
            name = f"{self.name}-{index}-{suffix()}"
            extra["hostname"] = template["spec"].get("hostname") or f"{self.name}-{index}"
        obj = self.cluster.new_pod(template, name, self.namespace, labels, **extra)
        return Pod(obj, self.cluster)

    def _fill(self) -> None:
        active = sum(1 for p in self.pods if not p.done.is_set())
        while self.pending and active < self.parallelism:
            index = self.pending.pop(0)
            pod = self.launch(self._pod(index))
            self.by_pod[pod.name] = index
            active += 1

    def start(self) -> None:
        self._fill()

    def poll(self) -> Outcome | None:
        for pod in list(self.pods):
            if not pod.done.is_set() or (pod.name in self.by_pod and self.by_pod[pod.name] in self.succeeded):
                continue
            if pod.phase == "Succeeded":
                self.succeeded.add(self.by_pod[pod.name])
            elif pod.phase == "Failed":
                if self.may_restart(self.backoff_limit):
                    self.pending.insert(0, self.by_pod.pop(pod.name))
                    self.pods.remove(pod)
                    continue
                return self.failed(pod, f"BackoffLimitExceeded: Job has reached the specified backoff limit "
                                        f"({self.backoff_limit}; {self.restarts} retries here)")
        if len(self.succeeded) >= self.completions:
            return Outcome(True, self.workload, f"Complete ({len(self.succeeded)}/{self.completions} succeeded)")
        self._fill()
        return None
