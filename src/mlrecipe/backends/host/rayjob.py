"""``training/raytrain`` and ``data-prep/ray-data-process`` outside Kubernetes: the RayJob's cluster on one host.

On a cluster KubeRay starts a head pod and ``resources.nnodes`` worker pods, then runs the entrypoint (the step
runtime) on the head. Here :mod:`mlrecipe.runtime.ray_cluster` starts the same nodes as Ray nodes on this host
(head: ``ray.resources``, with Ray's dashboard on 127.0.0.1; each worker: the recipe's per-node ``resources``),
submits the step runtime to the head as a Ray job through the Ray Jobs API, as KubeRay does (as the driver with
``RAY_ADDRESS`` set where Ray lacks ``ray[default]``), and stops every Ray process when it ends, fails or is
cancelled. It runs as the first process of its own PID namespace, so that when it dies, even by SIGKILL, the kernel
ends every process Ray started (Ray's agents rename themselves and outlive their raylet otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from mlrecipe.backends.host import resources
from mlrecipe.backends.host.launches import HostLaunch
from mlrecipe.backends.host.nodes import unshare
from mlrecipe.errors import ResourceError
from mlrecipe.runtime import RAY_CLUSTER_PATH
from mlrecipe.spec.load import StepSpec
from mlrecipe.spec.recipe import Resources


def _head_resources(step: StepSpec) -> Resources:
    head = ((step.recipe.ray or {}).get("resources") or {})
    return Resources.model_validate({"requests": head.get("requests") or {}, "limits": head.get("limits") or {}})


def cluster_spec(step: StepSpec) -> dict[str, Any]:
    """The head and worker nodes of the step's Ray cluster, as :mod:`mlrecipe.runtime.ray_cluster` reads them."""
    head = _head_resources(step)
    per_node = step.recipe.resources
    worker_cpus = resources.cpus(per_node) or os.cpu_count() or 1
    return {
        "head": {"num_cpus": resources.cpus(head) or 0, "num_gpus": resources.gpus(head) or 0},
        "workers": [{
            "group": step.chart.ray_worker_group,
            "replicas": per_node.nnodes,
            "num_cpus": worker_cpus,
            "num_gpus": resources.gpus(per_node) or 0,
        }],
    }


def problems(step: StepSpec) -> list[str]:
    """What stops the step's Ray cluster from being described (unreadable resource quantities)."""
    try:
        cluster_spec(step)
    except ResourceError as exc:
        return [f"chart {step.chart.name}: {exc}"]
    if shutil.which("unshare") is None:
        return [f"chart {step.chart.name} runs its Ray cluster in a PID namespace: install util-linux's unshare"]
    return []


def launch(step: StepSpec, step_dir: Path) -> HostLaunch:
    """The cluster file and the wrapper that runs the step runtime as a Ray job of a local Ray cluster."""
    spec = cluster_spec(step)
    path = step_dir / "ray" / "cluster.json"
    worker = spec["workers"][0]
    note = (f"step {step.name} runs as a Ray job on a Ray cluster on this machine: a head ({spec['head']['num_cpus']}"
            f" CPU) and {worker['replicas']} node(s) in group {worker['group']} ({worker['num_cpus']} CPU, "
            f"{worker['num_gpus']} GPU each); the recipe's command is submitted to it as a Ray job (the Ray Jobs API "
            "of a dashboard on 127.0.0.1), or runs as its driver (RAY_ADDRESS set) where Ray lacks ray[default]")
    return HostLaunch(files={path: json.dumps(spec, indent=2)}, wrapper=wrapper(RAY_CLUSTER_PATH, path),
                      notes=[note])


def wrapper(program: Path, spec: Path) -> list[str]:
    """The argv prefix that runs the step runtime as a Ray job of the cluster ``spec`` describes."""
    return [*unshare(pid=True), "python3", str(program), str(spec), "--"]


def remote_workers(step: StepSpec, launcher: list[str], cleanup: list[str]) -> dict[str, Any]:
    """The cluster spec with its worker nodes started by ``launcher`` (e.g. ``srun`` over the allocation's nodes,
    one ``ray start --block`` each) instead of on this host, and ``cleanup`` run on those nodes once they have
    stopped (their Ray temp dirs)."""
    return {**cluster_spec(step), "worker_launcher": launcher, "worker_cleanup": cleanup}
