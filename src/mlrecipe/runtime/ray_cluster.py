#!/usr/bin/env python3
"""A RayJob on one host: start a Ray cluster shaped like the recipe's head and worker groups, run the job's
entrypoint against it, stop the cluster.

Usage: ``python3 ray_cluster.py CLUSTER_JSON -- ENTRYPOINT...``

``CLUSTER_JSON`` holds ``{"head": {"num_cpus": n, "num_gpus": n}, "workers": [{"group": str, "replicas": n,
"num_cpus": n, "num_gpus": n, "resources": {name: n}}], "object_store_bytes": n, "worker_launcher": [argv]}``.
Each head and worker is a real Ray node (its own raylet), as each is a pod under KubeRay: on this host, or, with
``worker_launcher`` (e.g. ``srun --nodes=N --ntasks-per-node=1``), each worker group started by that launcher as
``ray start --address=<head> --block`` on the nodes it reaches. The entrypoint (the step runtime,
which runs the recipe's scripts) runs as the Ray driver with ``RAY_ADDRESS`` pointing at the head, as KubeRay's
job runs on the head; its exit status is this program's. SIGTERM / SIGINT / SIGHUP stop the entrypoint's process
group, then the cluster: no Ray process outlives this one. Needs ``ray`` in the interpreter that runs it; uses
nothing of mlrecipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

GRACE_SECONDS = float(os.environ.get("MLRECIPE_STOP_GRACE", "15"))
DEFAULT_OBJECT_STORE = 128 * 1024 * 1024


def _say(message: str) -> None:
    print(f"[mlrecipe] {message}", flush=True)


def start_cluster(spec: dict, temp_dir: str):
    """The running cluster (``ray.cluster_utils.Cluster``): the head, then every worker node on this host (none with
    ``worker_launcher``), and the cluster's shape for the log. Its session files (and the address file that a bare
    ``ray.init()`` would otherwise find and connect to after this cluster is gone) live in ``temp_dir``."""
    from ray.cluster_utils import Cluster

    store = int(spec.get("object_store_bytes") or DEFAULT_OBJECT_STORE)
    head = spec.get("head") or {}
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": head.get("num_cpus", 0), "num_gpus": head.get("num_gpus", 0),
        "object_store_memory": store, "include_dashboard": False, "temp_dir": temp_dir,
    })
    shape = [f"head ({head.get('num_cpus', 0)} CPU)"]
    if spec.get("worker_launcher"):
        return cluster, shape
    try:
        for group in spec.get("workers") or []:
            for _ in range(int(group.get("replicas", 1))):
                cluster.add_node(num_cpus=group.get("num_cpus", 1), num_gpus=group.get("num_gpus", 0),
                                 resources=group.get("resources") or None, object_store_memory=store)
            shape.append(f"{group.get('replicas', 1)} x {group.get('group', 'workers')} "
                         f"({group.get('num_cpus', 1)} CPU, {group.get('num_gpus', 0)} GPU each)")
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, shape


def _end_with_parent() -> None:
    """In the entrypoint: get SIGTERM when this program dies, even by SIGKILL (Ray's own daemons share our fate
    the same way)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_remote_workers(spec: dict, address: str, shape: list[str]) -> list[subprocess.Popen]:
    """Start each worker group with the spec's ``worker_launcher`` and wait until every worker node has joined."""
    import ray

    store = int(spec.get("object_store_bytes") or DEFAULT_OBJECT_STORE)
    launched, expected = [], 1
    for group in spec.get("workers") or []:
        argv = [*spec["worker_launcher"], "ray", "start", f"--address={address}", "--block", "--disable-usage-stats",
                f"--num-cpus={group.get('num_cpus', 1)}", f"--num-gpus={group.get('num_gpus', 0)}",
                f"--object-store-memory={store}"]
        launched.append(subprocess.Popen(argv, start_new_session=True, preexec_fn=_end_with_parent))
        expected += int(group.get("replicas", 1))
        shape.append(f"{group.get('replicas', 1)} x {group.get('group', 'workers')} "
                     f"({group.get('num_cpus', 1)} CPU, {group.get('num_gpus', 0)} GPU each)")
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        deadline = time.monotonic() + float(os.environ.get("MLRECIPE_RAY_JOIN_TIMEOUT", "300"))
        while len([n for n in ray.nodes() if n["Alive"]]) < expected:
            if any(p.poll() is not None for p in launched) or time.monotonic() > deadline:
                raise RuntimeError(f"the worker nodes did not join the Ray cluster at {address}")
            time.sleep(0.5)
    finally:
        ray.shutdown()
    return launched


def stop_remote_workers(launched: list[subprocess.Popen]) -> None:
    """SIGTERM each launcher (srun passes it to its tasks; ``ray start --block`` then stops its node)."""
    for proc in launched:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in launched:
        try:
            proc.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


class _Stop:
    """Signal handler: remember the signal and pass it to the entrypoint's process group."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.signum: int | None = None

    def __call__(self, signum: int, _frame: object) -> None:
        self.signum = signum
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signum)


def run_entrypoint(argv: list[str], address: str, stop: _Stop) -> int:
    """Run ``argv`` as the Ray driver of the cluster at ``address``; its exit status."""
    env = {**os.environ, "RAY_ADDRESS": address}
    stop.child = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=_end_with_parent)
    if stop.signum is not None:
        stop(stop.signum, None)
    try:
        status = stop.child.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            deadline = time.monotonic() + GRACE_SECONDS
            while stop.child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(stop.child.pid, signal.SIGKILL)
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: ray_cluster.py CLUSTER_JSON -- ENTRYPOINT...\n")
        return 2
    with open(args[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    stop = _Stop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    temp_dir = tempfile.mkdtemp(prefix="mlrecipe-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    try:
        cluster, shape = start_cluster(spec, temp_dir)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    remote: list[subprocess.Popen] = []
    try:
        if spec.get("worker_launcher"):
            remote = start_remote_workers(spec, cluster.address, shape)
        _say(f"Ray cluster at {cluster.address}: {', '.join(shape)}")
        if stop.signum is not None:
            return 128 + stop.signum
        status = run_entrypoint(args[2:], cluster.address, stop)
    finally:
        stop_remote_workers(remote)
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        _say("Ray cluster stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
