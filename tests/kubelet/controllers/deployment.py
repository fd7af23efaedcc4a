"""apps/v1 Deployment (and the Services over it) for the serving charts: ``replicas`` pods
``<deployment>-<hash>-<suffix>`` from the template; the workload has reached its goal when every pod is Ready
(each container's readinessProbe succeeded once, a container without one: started), then it keeps running until the
harness's run ends. A container that exits before that fails it. Simpler here: liveness and startup probes are not
run, no rolling update, Services resolve to one pod's address (no kube-proxy, no load balancing), the
HorizontalPodAutoscaler is not acted on."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.kubelet.controllers import Controller, suffix
from tests.kubelet.pods import Pod
from tests.kubelet.probes import ReadinessProbes
from tests.kubelet.report import Outcome


class DeploymentController(Controller):
    kind = "Deployment"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        self.replicas = int((obj.get("spec") or {}).get("replicas", 1))
        self.ready: set[str] = set()
        self.probes = ReadinessProbes()

    def start(self) -> None:
        template = self.obj["spec"]["template"]
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        made = []
        for _ in range(self.replicas):
            obj = self.cluster.new_pod(template, f"{self.name}-{digest}-{suffix()}", self.namespace,
                                       {"pod-template-hash": digest})
            pod = Pod(obj, self.cluster)
            self.cluster.register(pod)
            made.append(pod)
        for pod in made:
            self.pods.append(pod)
            pod.start()

    def poll(self) -> Outcome | None:
        for pod in self.pods:
            if pod.done.is_set():
                summary = "a server's container exited before every pod was ready"
                if pod.failure is not None:
                    return self.failed(pod, summary)
                container = next(iter(pod.containers), None)
                return Outcome(False, self.workload, summary + " (exit code 0)", pod.name, container,
                               pod.log_tail(container) if container else "")
            if pod.name not in self.ready and self.probes.ready(pod):
                self.ready.add(pod.name)
        if len(self.ready) == self.replicas:
            return Outcome(True, self.workload, f"ready ({self.replicas}/{self.replicas} pods Ready)")
        return None
