"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet as sigs.k8s.io/lws v0.8.0 runs it (github.com/kubernetes-sigs/lws,
tag v0.8.0, the version ``../shared/crds`` holds the CRD of):

- defaults (pkg/webhooks/leaderworkerset_webhook.go Default): ``restartPolicy`` RecreateGroupOnPodRestart,
  ``subdomainPolicy`` Shared, ``startupPolicy`` LeaderCreated (api/leaderworkerset/v1/leaderworkerset_types.go);
- pods (pkg/controllers/leaderworkerset_controller.go constructLeaderStatefulSetApplyConfiguration, pod_controller.go
  constructWorkerStatefulSetApplyConfiguration): a leader StatefulSet ``<lws>`` (serviceName ``<lws>``) of
  ``replicas`` leader pods ``<lws>-<group>`` from ``leaderTemplate`` (else ``workerTemplate``), and per leader a
  worker StatefulSet ``<lws>-<group>`` (ordinals from 1) of ``size - 1`` pods ``<lws>-<group>-<index>`` from
  ``workerTemplate``; each pod's hostname is its name and its subdomain the service name, as the StatefulSet
  controller sets them;
- labels and annotations: leader ``leaderworkerset.sigs.k8s.io/name``, ``worker-index`` "0",
  ``template-revision-hash``, annotation ``size``; the pod webhook (pkg/webhooks/pod_webhook.go Default) adds
  ``group-index`` (the leader's ordinal) and ``group-key`` (sha1 of ``<ns>/<leader pod>``,
  pkg/utils/utils.go Sha1Hash); workers get ``name``, ``group-index``, ``group-key`` and the revision from their
  leader, annotations ``size`` and ``leader-name``, and ``worker-index`` (their ordinal) from the webhook;
- env (pkg/utils/pod/pod_utils.go AddLWSVariables): put first in every container and init container, the
  container's own entries of the same names dropped: ``LWS_LEADER_ADDRESS`` =
  ``<lws>-<group>.<subdomain>.<ns>``, ``LWS_GROUP_SIZE`` = size, ``LWS_WORKER_INDEX`` = the worker-index label
  (v0.8.0 injects no ``LWS_NAME``; TPU variables only for pods requesting TPUs);
- the headless Service ``<lws>`` (pkg/utils/controller/controller_utils.go CreateHeadlessServiceIfNotExists:
  ``clusterIP: None``, selector ``name``, ``publishNotReadyAddresses``), so ``<pod>.<lws>.<ns>`` resolves to each pod;
- ``startupPolicy: LeaderReady`` creates a group's workers only once its leader pod is Ready (pod_controller.go
  Reconcile); LeaderCreated creates them with the leader;
- readiness (leaderworkerset_controller.go updateConditions): a group is ready when its leader pod is Running and
  Ready and its worker StatefulSet has all ``size - 1`` pods (statefulset_utils.go StatefulsetReady compares
  ``status.replicas``, the pods created, not their readiness); the set is Available when ``replicas`` groups are.

Simpler here: a container that exits before the set is Available fails the run unless ``--max-restarts`` allows
another try, which restarts the whole group (RecreateGroupOnPodRestart) or the pod (None) under the same names;
``subdomainPolicy: UniquePerReplica``, subgroups, exclusive placement, rolling updates and the revision's
ControllerRevision are not modelled (the revision label is a digest of the template, not lws's hash).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from tests.kubelet.controllers import Controller
from tests.kubelet.pods import Pod
from tests.kubelet.probes import ReadinessProbes
from tests.kubelet.report import Outcome

PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME, GROUP_INDEX, WORKER_INDEX = PREFIX + "name", PREFIX + "group-index", PREFIX + "worker-index"
GROUP_KEY, REVISION = PREFIX + "group-key", PREFIX + "template-revision-hash"
SIZE, LEADER_NAME = PREFIX + "size", PREFIX + "leader-name"
ENV_NAMES = ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")


def lws_env(container: dict[str, Any], leader_address: str, size: int, worker_index: int) -> list[dict[str, Any]]:
    """``container``'s env after AddLWSVariables: the three LWS variables first, then its own others in order."""
    first = [{"name": "LWS_LEADER_ADDRESS", "value": leader_address}, {"name": "LWS_GROUP_SIZE", "value": str(size)},
             {"name": "LWS_WORKER_INDEX", "value": str(worker_index)}]
    return first + [e for e in container.get("env") or [] if e["name"] not in ENV_NAMES]


class LeaderWorkerSetController(Controller):
    kind = "LeaderWorkerSet"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        spec = obj["spec"]
        self.replicas = int(spec.get("replicas", 1))
        self.template = spec["leaderWorkerTemplate"]
        self.size = int(self.template.get("size", 1))
        self.startup = spec.get("startupPolicy") or "LeaderCreated"
        self.restart_policy = self.template.get("restartPolicy") or "RecreateGroupOnPodRestart"
        if self.restart_policy == "Default":
            self.restart_policy = "None"
        subdomain = ((spec.get("networkConfig") or {}).get("subdomainPolicy")) or "Shared"
        if subdomain != "Shared":
            raise ValueError(f"{self.workload}: subdomainPolicy {subdomain} is not covered by the harness")
        self.revision = hashlib.sha256(json.dumps(self.template, sort_keys=True).encode()).hexdigest()[:10]
        self.leaders: dict[int, Pod] = {}
        self.workers: dict[int, list[Pod]] = {}
        self.ready: set[int] = set()
        self.probes = ReadinessProbes()

    def _pod(self, template: dict[str, Any], name: str, labels: dict[str, str], annotations: dict[str, str],
             group: int, worker_index: int) -> Pod:
        template = copy.deepcopy(template)
        address = f"{self.name}-{group}.{self.name}.{self.namespace}"
        for key in ("containers", "initContainers"):
            for container in template["spec"].get(key) or []:
                container["env"] = lws_env(container, address, self.size, worker_index)
        labels = {**labels, "statefulset.kubernetes.io/pod-name": name,
                  "apps.kubernetes.io/pod-index": str(worker_index if worker_index else group)}
        obj = self.cluster.new_pod(template, name, self.namespace, labels, hostname=name, subdomain=self.name)
        obj["metadata"]["annotations"] = {**obj["metadata"]["annotations"], **annotations}
        pod = Pod(obj, self.cluster)
        self.cluster.register(pod)
        return pod

    def _leader(self, group: int) -> Pod:
        name = f"{self.name}-{group}"
        key = hashlib.sha1(f"{self.namespace}/{name}".encode()).hexdigest()
        labels = {NAME: self.name, WORKER_INDEX: "0", REVISION: self.revision, GROUP_INDEX: str(group),
                  GROUP_KEY: key}
        template = self.template.get("leaderTemplate") or self.template["workerTemplate"]
        return self._pod(template, name, labels, {SIZE: str(self.size)}, group, 0)

    def _workers(self, leader: Pod, group: int) -> list[Pod]:
        meta = leader.obj["metadata"]["labels"]
        made = []
        for index in range(1, self.size):
            labels = {NAME: self.name, GROUP_INDEX: str(group), GROUP_KEY: meta[GROUP_KEY], REVISION: self.revision,
                      WORKER_INDEX: str(index)}
            made.append(self._pod(self.template["workerTemplate"], f"{leader.name}-{index}", labels,
                                  {SIZE: str(self.size), LEADER_NAME: leader.name}, group, index))
        return made

    def _run(self, pods: list[Pod]) -> None:
        for pod in pods:
            self.pods.append(pod)
            pod.start()

    def start(self) -> None:
        self.cluster.store.add({"apiVersion": "v1", "kind": "Service",
                                "metadata": {"name": self.name, "namespace": self.namespace,
                                             "labels": {NAME: self.name}},
                                "spec": {"clusterIP": "None", "selector": {NAME: self.name},
                                         "publishNotReadyAddresses": True}})
        made: list[Pod] = []
        for group in range(self.replicas):
            self.leaders[group] = self._leader(group)
            made.append(self.leaders[group])
            if self.startup != "LeaderReady" and self.size > 1:
                self.workers[group] = self._workers(self.leaders[group], group)
                made += self.workers[group]
        self._run(made)  # every name made so far resolves before any pod starts

    def _group(self, pod: Pod) -> int:
        return int(pod.obj["metadata"]["labels"][GROUP_INDEX])

    def _recreate(self, pod: Pod) -> None:
        group = self._group(pod)
        again = [pod] if self.restart_policy == "None" else [self.leaders[group], *self.workers.get(group, [])]
        self.ready.discard(group)
        for old in again:
            self.probes.forget(old.name)
            new = self.restart(old)
            if old is self.leaders[group]:
                self.leaders[group] = new
            else:
                self.workers[group][self.workers[group].index(old)] = new

    def poll(self) -> Outcome | None:
        for pod in list(self.pods):
            if pod.done.is_set() and pod in self.pods:
                if self.restarts < self.cluster.max_restarts:  # lws itself recreates without limit
                    self.restarts += 1
                    self.cluster.note(f"{self.workload}: pod {pod.name} ended; restartPolicy {self.restart_policy} "
                                      f"followed up to --max-restarts {self.cluster.max_restarts}")
                    self._recreate(pod)
                    continue
                summary = f"group {self._group(pod)}: a container exited before the set was Available"
                if pod.failure is not None:
                    return self.failed(pod, summary)
                container = next(iter(pod.containers), None)
                return Outcome(False, self.workload, summary + " (exit code 0)", pod.name, container,
                               pod.log_tail(container) if container else "")
        for group, leader in self.leaders.items():
            if group in self.ready or not self.probes.ready(leader):
                continue
            if group not in self.workers and self.size > 1:  # LeaderReady: the worker StatefulSet comes now
                self.workers[group] = self._workers(leader, group)
                self._run(self.workers[group])
            if len(self.workers.get(group, [])) == self.size - 1:
                self.ready.add(group)
        if len(self.ready) == self.replicas:
            return Outcome(True, self.workload, f"Available ({self.replicas}/{self.replicas} groups ready, "
                                                f"{self.size} pods each)")
        return None

    def timed_out(self, timeout: float) -> Outcome:
        waiting = next((g for g in sorted(self.leaders) if g not in self.ready), None)
        if waiting is None:
            return super().timed_out(timeout)
        leader = self.leaders[waiting]
        container = next((c["name"] for c in leader.obj["spec"]["containers"] if c.get("readinessProbe")),
                         next(iter(leader.containers), None))
        return Outcome(False, self.workload, f"group {waiting}: leader not Ready within --timeout {timeout:.0f} s "
                       "(its readinessProbe never succeeded)", leader.name, container,
                       leader.log_tail(container) if container else "")
