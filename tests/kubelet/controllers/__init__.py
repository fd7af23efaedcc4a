"""One controller per covered kind; the kinds the harness knows it does not cover; the kinds it ignores."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from tests.kubelet.pods import Pod
from tests.kubelet.report import Outcome

if TYPE_CHECKING:
    from tests.kubelet.harness import Cluster


def suffix(length: int = 5) -> str:
    """A random name suffix as the API server's generateName gives (lower-case letters and digits)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(length))


class Controller:
    """Base of every controller: ``start`` creates the pods, ``poll`` returns an :class:`Outcome` once the workload
    has succeeded (or is ready, for a server) or failed, ``stop`` ends its pods."""

    kind = ""

    def __init__(self, obj: dict[str, Any], cluster: Cluster) -> None:
        self.obj = obj
        self.cluster = cluster
        self.name: str = obj["metadata"]["name"]
        self.namespace: str = cluster.store.namespace_of(obj)
        self.pods: list[Pod] = []
        self.restarts = 0

    @property
    def workload(self) -> str:
        return f"{self.kind}/{self.name}"

    def start(self) -> None:
        raise NotImplementedError

    def poll(self) -> Outcome | None:
        raise NotImplementedError

    def launch(self, pod: Pod) -> Pod:
        self.cluster.register(pod)
        self.pods.append(pod)
        pod.start()
        return pod

    def may_restart(self, backoff_limit: int) -> bool:
        """Whether a failed pod is started again: ``backoffLimit``, cut to the harness's ``--max-restarts``."""
        budget = min(backoff_limit, self.cluster.max_restarts)
        if backoff_limit > budget:
            self.cluster.note(f"{self.workload}: backoffLimit {backoff_limit} followed only up to --max-restarts "
                              f"{self.cluster.max_restarts}")
        if self.restarts < budget:
            self.restarts += 1
            return True
        return False

    def restart(self, pod: Pod) -> Pod:
        """A failed pod again (same name and address: a container restarted in place by restartPolicy)."""
        pod.stop()
        again = Pod(pod.obj, self.cluster, pod.extra_mounts)
        self.pods[self.pods.index(pod)] = again
        self.cluster.pods.append(again)
        again.start()
        return again

    def failed(self, pod: Pod, summary: str, hints: list[str] | None = None) -> Outcome:
        failure = pod.failure
        container = failure.container if failure else None
        reason = ""
        if failure is not None:
            code = f"exit code {failure.exit_code}, " if failure.exit_code is not None else ""
            reason = f" ({code}{failure.reason})"
        tail = pod.log_tail(container) if container else ""
        return Outcome(False, self.workload, summary + reason, pod.name, container, tail, hints or [])

    def timed_out(self, timeout: float) -> Outcome:
        running = [p for p in self.pods if not p.done.is_set()]
        pod = running[0] if running else (self.pods[0] if self.pods else None)
        container = next(iter(pod.containers), None) if pod else None
        tail = pod.log_tail(container) if pod and container else ""
        return Outcome(False, self.workload, f"did not finish within --timeout {timeout:.0f} s",
                       pod.name if pod else None, container, tail)

    def stop(self) -> None:
        for pod in self.pods:
            pod.stop()


from tests.kubelet.controllers.deployment import DeploymentController  # noqa: E402
from tests.kubelet.controllers.job import JobController  # noqa: E402
from tests.kubelet.controllers.lws import LeaderWorkerSetController  # noqa: E402
from tests.kubelet.controllers.mpijob import MPIJobController  # noqa: E402
from tests.kubelet.controllers.pytorchjob import PyTorchJobController  # noqa: E402
from tests.kubelet.controllers.raycluster import RayClusterController  # noqa: E402
from tests.kubelet.controllers.rayjob import RayJobController  # noqa: E402
from tests.kubelet.controllers.rayservice import RayServiceController  # noqa: E402
from tests.kubelet.controllers.trainjob import TrainJobController  # noqa: E402

COVERED: dict[str, type[Controller]] = {"Job": JobController, "PyTorchJob": PyTorchJobController,
                                        "MPIJob": MPIJobController, "Deployment": DeploymentController,
                                        "TrainJob": TrainJobController, "RayJob": RayJobController,
                                        "RayService": RayServiceController, "RayCluster": RayClusterController,
                                        "LeaderWorkerSet": LeaderWorkerSetController}
NOT_COVERED = {
    "StatefulSet": "no StatefulSet controller in the harness",
    "DaemonSet": "no DaemonSet controller in the harness",
    "Pod": "bare Pods are not run by the harness",
}
IGNORED = {"HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
           "ClusterRoleBinding", "NetworkPolicy", "Ingress", "ServiceMonitor", "PodMonitor", "PersistentVolumeClaim",
           "PersistentVolume", "StorageClass", "PriorityClass", "LocalQueue", "ClusterQueue", "ResourceFlavor",
           "Namespace"}
