"""What the pods of a PyTorchJob (training operator v1) and of a TrainJob (Kubeflow Trainer v2.3.0) would run,
from the rendered objects alone (no operator runs here).

``v1_pods``: each replica's pod template, with the ``PET_*`` variables the training operator adds.
``v2_pod``: the ``torch-distributed`` ClusterTrainingRuntime's pod template (``../shared/crds/``) with the
TrainJob's ``trainer`` fields and ``runtimePatches`` applied, and the ``PET_*`` variables Trainer's torch plugin
adds (``PET_NNODES`` = numNodes, ``PET_NPROC_PER_NODE`` = numProcPerNode, else ``auto``, or the CPU limit when the
node asks for no GPU; ``PET_NODE_RANK`` from the Job completion index, ``PET_MASTER_ADDR``
``<name>-node-0-0.<name>``, ``PET_MASTER_PORT`` 29400), as its torch plugin's EnforceMLPolicy does.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from mlrecipe.helm.validate import crds_dir

TRAINER_DIR = "kubeflow-trainer-v2.3.0"
TRAINER_PORT = 29400
PET_NAMES = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")


def runtime(name: str = "torch-distributed") -> dict[str, Any]:
    """The ClusterTrainingRuntime Trainer v2.3.0 installs as ``name``."""
    path = crds_dir() / TRAINER_DIR / f"runtime-{name.replace('-', '_')}.yaml"
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


def v1_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Each replica's pod spec of a PyTorchJob, its first container given the training operator's PET_* env."""
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    nnodes = sum(int(r.get("replicas", 1)) for r in replicas.values())
    elastic = spec.get("elasticPolicy")
    pods = []
    rank = 0
    for role in ("Master", "Worker"):
        for _ in range(int(replicas.get(role, {}).get("replicas", 0))):
            pod = copy.deepcopy(replicas[role]["template"]["spec"])
            nnodes_value = f"{elastic['minReplicas']}:{elastic['maxReplicas']}" if elastic else str(nnodes)
            pet = {"PET_NNODES": nnodes_value, "PET_NPROC_PER_NODE": str(spec.get("nprocPerNode", "auto")),
                   "PET_NODE_RANK": str(rank), "PET_MASTER_ADDR": f"{job['metadata']['name']}-master-0",
                   "PET_MASTER_PORT": "23456"}
            pod["containers"][0]["env"] = [*pod["containers"][0].get("env", []),
                                           *({"name": k, "value": v} for k, v in pet.items())]
            pods.append(pod)
            rank += 1
    return pods


def _by_name(items: list[dict[str, Any]], patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A strategic merge of lists keyed by name: patched entries replace, new ones are added."""
    out = {i["name"]: i for i in items}
    out.update({i["name"]: i for i in patch})
    return list(out.values())


def torch_nproc(trainer: dict[str, Any]) -> str:
    """``PET_NPROC_PER_NODE`` as the torch plugin sets it (numProcPerNode; else ``auto``, or with resources and no
    GPU among the limits, the CPU limit, at least 1)."""
    if "numProcPerNode" in trainer:
        return str(trainer["numProcPerNode"])
    limits = (trainer.get("resourcesPerNode") or {}).get("limits")
    if limits is None:
        return "1" if trainer.get("resourcesPerNode") is not None else "auto"
    if any("gpu" in name.lower() for name in limits):
        return "auto"
    return str(max(1, int(float(str(limits.get("cpu", 0))))))


def merged_runtime(job: dict[str, Any], rt: dict[str, Any]) -> dict[str, Any]:
    """The runtime with the TrainJob's runtimePatches applied to replicated job ``node`` (what Trainer builds its
    JobSet from)."""
    out = copy.deepcopy(rt)
    rjobs = out["spec"]["template"]["spec"]["replicatedJobs"]
    for patch in job["spec"].get("runtimePatches", []):
        for rpatch in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            target = next(r for r in rjobs if r["name"] == rpatch["name"])
            tpl = target["template"]["spec"]["template"]
            ptpl = rpatch["template"]["spec"]["template"]
            meta = tpl.setdefault("metadata", {})
            for key in ("labels", "annotations"):
                meta[key] = {**meta.get(key, {}), **ptpl.get("metadata", {}).get(key, {})}
            pspec = ptpl.get("spec", {})
            spec = tpl["spec"]
            for key in ("nodeSelector",):
                if key in pspec:
                    spec[key] = {**spec.get(key, {}), **pspec[key]}
            for key in ("tolerations",):
                if key in pspec:
                    spec[key] = [*spec.get(key, []), *pspec[key]]
            if "volumes" in pspec:
                spec["volumes"] = _by_name(spec.get("volumes", []), pspec["volumes"])
            for cpatch in pspec.get("containers", []):
                container = next(c for c in spec["containers"] if c["name"] == cpatch["name"])
                if "volumeMounts" in cpatch:
                    container["volumeMounts"] = _by_name(container.get("volumeMounts", []), cpatch["volumeMounts"])
    return out


def node_template(job: dict[str, Any], rt: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a TrainJob's nodes (replicated job ``node``), its container ``node`` as Trainer sets it:
    the trainer fields, the torch plugin's PET_* env (``PET_NODE_RANK`` from the Job completion index annotation)
    and container port 29400."""
    merged = merged_runtime(job, rt)
    rjob = next(r for r in merged["spec"]["template"]["spec"]["replicatedJobs"] if r["name"] == "node")
    template = copy.deepcopy(rjob["template"]["spec"]["template"])
    trainer = job["spec"]["trainer"]
    container = next(c for c in template["spec"]["containers"] if c["name"] == "node")
    for key in ("image", "command", "args"):
        if key in trainer:
            container[key] = trainer[key]
    if "resourcesPerNode" in trainer:
        container["resources"] = trainer["resourcesPerNode"]
    name = job["metadata"]["name"]
    rank = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    container["env"] = [*container.get("env", []), *trainer.get("env", []),
                        {"name": "PET_NNODES", "value": str(num_nodes(job, merged))},
                        {"name": "PET_NPROC_PER_NODE", "value": torch_nproc(trainer)},
                        {"name": "PET_NODE_RANK", "valueFrom": rank},
                        {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
                        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)}]
    container["ports"] = [*container.get("ports", []), {"containerPort": TRAINER_PORT}]
    return template


def num_nodes(job: dict[str, Any], rt: dict[str, Any]) -> int:
    """The TrainJob's node count (its own, else the runtime's)."""
    return int(job["spec"]["trainer"].get("numNodes", rt["spec"]["mlPolicy"].get("numNodes", 1)))


def v2_pod(job: dict[str, Any], rt: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a TrainJob's node (rank aside: ``PET_NODE_RANK`` shown as ``<job completion index>``)."""
    pod = node_template(job, rt)["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "node")
    container["env"] = [{"name": e["name"], "value": "<job completion index>"} if "valueFrom" in e
                        and e["name"] == "PET_NODE_RANK" else e for e in container["env"]]
    return pod
