"""kubeflow.org/v1 PyTorchJob as the training operator v1.9 runs it (github.com/kubeflow/training-operator, tag
v1.9.0 and branch release-1.9, which v1.9.2 is cut from; the files below are the same on both):

- defaults (pkg/apis/kubeflow.org/v1/pytorch_defaults.go): replicas 1, the port ``pytorchjob-port`` 23456 on the
  container ``pytorch`` unless it has one, ``nprocPerNode`` "auto" (when the elastic policy sets no
  ``nProcPerNode``), elastic min/max replicas from each other or from the Worker replicas;
- pods ``<job>-<master|worker>-<i>`` and one headless Service of the same name per pod
  (pkg/controller.v1/common/service.go CreateNewService), so ``<job>-master-0`` resolves to the master's pod;
- env appended to every container (pkg/controller.v1/pytorch/envvar.go setPodEnv, master.go, elastic.go):
  ``PYTHONUNBUFFERED=1``; with a Master: ``MASTER_PORT``, ``PET_MASTER_PORT``, ``MASTER_ADDR``, ``PET_MASTER_ADDR``
  (``<job>-master-0``), ``WORLD_SIZE`` (replicas x nprocPerNode, 1 for "auto"), ``RANK`` and ``PET_NODE_RANK``
  (worker i: i + 1); ``PET_NPROC_PER_NODE``; with an elastic policy ``PET_RDZV_ENDPOINT`` (rdzvHost or
  ``<job>-worker-0``, rdzvPort or the worker's port), ``PET_RDZV_BACKEND`` (c10d default), ``PET_NNODES``
  (``min:max``), ``PET_MAX_RESTARTS``, ``PET_NPROC_PER_NODE`` (elastic nProcPerNode), ``PET_RDZV_ID``,
  ``PET_RDZV_CONF``, ``PET_STANDALONE``; without one ``PET_NNODES`` (all replicas);
- success (pytorchjob_controller.go UpdateJobStatus): the Master succeeded; without a Master every Worker succeeded,
  or one did under an elastic policy. A failed pod fails the job once the restart budget is spent.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kubelet.controllers import Controller
from tests.kubelet.pods import Pod
from tests.kubelet.report import Outcome

DEFAULT_PORT = 23456
PORT_NAME = "pytorchjob-port"
CONTAINER = "pytorch"


def _port(template: dict[str, Any]) -> int | None:
    for container in template["spec"]["containers"]:
        if container["name"] == CONTAINER:
            for port in container.get("ports") or []:
                if port.get("name") == PORT_NAME:
                    return int(port["containerPort"])
    return None


class PyTorchJobController(Controller):
    kind = "PyTorchJob"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        self.spec = copy.deepcopy(obj["spec"])
        self.replicas = {rtype: spec for rtype, spec in (self.spec.get("pytorchReplicaSpecs") or {}).items()}
        for spec in self.replicas.values():
            spec.setdefault("replicas", 1)
            template = spec["template"]
            if _port(template) is None:
                for container in template["spec"]["containers"]:
                    if container["name"] == CONTAINER:
                        container.setdefault("ports", []).append({"name": PORT_NAME, "containerPort": DEFAULT_PORT})
        elastic = self.spec.get("elasticPolicy")
        if elastic is not None:
            workers = int((self.replicas.get("Worker") or {}).get("replicas", 1))
            low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
            elastic["minReplicas"] = low if low is not None else (high if high is not None else workers)
            elastic["maxReplicas"] = high if high is not None else elastic["minReplicas"]
        if (elastic is None or elastic.get("nProcPerNode") is None) and self.spec.get("nprocPerNode") is None:
            self.spec["nprocPerNode"] = "auto"
        self.backoff_limit = int((self.spec.get("runPolicy") or {}).get("backoffLimit", 2 ** 31))

    def _env(self, rtype: str, index: int) -> list[dict[str, str]]:
        total = sum(int(s["replicas"]) for s in self.replicas.values())
        nproc = str(self.spec.get("nprocPerNode") or "")
        world = total * (int(nproc) if nproc.isdigit() else 1)
        env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
        if "Master" in self.replicas:
            port = _port(self.replicas["Master"]["template"])
            if port is None:
                raise ValueError("the Master has no container 'pytorch' with a port 'pytorchjob-port'")
            addr = f"{self.name}-master-0"
            rank = index + 1 if rtype == "Worker" else index
            env += [{"name": "MASTER_PORT", "value": str(port)}, {"name": "PET_MASTER_PORT", "value": str(port)},
                    {"name": "MASTER_ADDR", "value": addr}, {"name": "PET_MASTER_ADDR", "value": addr},
                    {"name": "WORLD_SIZE", "value": str(world)}, {"name": "RANK", "value": str(rank)},
                    {"name": "PET_NODE_RANK", "value": str(rank)}]
        if self.spec.get("nprocPerNode") is not None:
            env.append({"name": "PET_NPROC_PER_NODE", "value": nproc})
        elastic = self.spec.get("elasticPolicy")
        if elastic is None:
            env.append({"name": "PET_NNODES", "value": str(total)})
            return env
        host = elastic.get("rdzvHost") or f"{self.name}-worker-0"
        rdzv_port = elastic.get("rdzvPort") or _port(self.replicas["Worker"]["template"])
        env += [{"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{rdzv_port}"},
                {"name": "PET_RDZV_BACKEND", "value": str(elastic.get("rdzvBackend") or "c10d")},
                {"name": "PET_NNODES", "value": f"{elastic['minReplicas']}:{elastic['maxReplicas']}"}]
        if elastic.get("maxRestarts") is not None:
            env.append({"name": "PET_MAX_RESTARTS", "value": str(elastic["maxRestarts"])})
        if elastic.get("nProcPerNode") is not None:
            env.append({"name": "PET_NPROC_PER_NODE", "value": str(elastic["nProcPerNode"])})
        if elastic.get("rdzvId") is not None:
            env.append({"name": "PET_RDZV_ID", "value": str(elastic["rdzvId"])})
        if elastic.get("rdzvConf"):
            conf = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
            env.append({"name": "PET_RDZV_CONF", "value": conf})
        if elastic.get("standalone"):
            env.append({"name": "PET_STANDALONE", "value": ""})
        return env

    def start(self) -> None:
        made: list[Pod] = []
        for rtype in ("Master", "Worker"):
            spec = self.replicas.get(rtype)
            if spec is None:
                continue
            for index in range(int(spec["replicas"])):
                template = copy.deepcopy(spec["template"])
                for container in template["spec"]["containers"]:
                    container["env"] = [*(container.get("env") or []), *self._env(rtype, index)]
                name = f"{self.name}-{rtype.lower()}-{index}"
                labels = {"training.kubeflow.org/job-name": self.name,
                          "training.kubeflow.org/replica-type": rtype.lower(),
                          "training.kubeflow.org/replica-index": str(index)}
                obj = self.cluster.new_pod(template, name, self.namespace, labels)
                ports = [{"name": p["name"], "port": p["containerPort"]} for c in template["spec"]["containers"]
                         if c["name"] == CONTAINER for p in c.get("ports") or [] if p.get("name")]
                self.cluster.store.add({"apiVersion": "v1", "kind": "Service",
                                        "metadata": {"name": name, "namespace": self.namespace},
                                        "spec": {"clusterIP": "None", "selector": labels, "ports": ports}})
                pod = Pod(obj, self.cluster)
                self.cluster.register(pod)
                made.append(pod)
        for pod in made:  # every name resolves before any pod starts
            self.pods.append(pod)
            pod.start()

    def poll(self) -> Outcome | None:
        for pod in list(self.pods):
            if pod.phase == "Failed":
                if self.may_restart(self.backoff_limit):
                    self.restart(pod)
                    continue
                return self.failed(pod, "Failed: a replica failed")
        by_type = {r: [p for p in self.pods if p.obj["metadata"]["labels"].get(
            "training.kubeflow.org/replica-type") == r.lower()] for r in self.replicas}
        if "Master" in by_type:
            done = all(p.phase == "Succeeded" for p in by_type["Master"])
        else:
            workers = by_type.get("Worker", [])
            elastic = self.spec.get("elasticPolicy") is not None
            done = all(p.phase == "Succeeded" for p in workers) or (elastic and any(
                p.phase == "Succeeded" for p in workers))
        if done:
            return Outcome(True, self.workload, "Succeeded")
        return None
