"""A Ray job for the RayJob tests: ``data`` squares numbers with Ray Data across the cluster's nodes. Writes a JSON
report."""

from __future__ import annotations

import argparse
import json
import os
import socket
import time


def data(out: str) -> dict:
    import ray

    total = ray.data.range(1000).map(lambda row: {"sq": row["id"] ** 2}).sum("sq")

    @ray.remote(num_cpus=1)
    def where() -> str:
        time.sleep(0.3)  # long enough that one node's single CPU cannot take them all
        return ray.get_runtime_context().get_node_id()

    nodes = set(ray.get([where.remote() for _ in range(20)]))
    return {"sum_of_squares": total, "task_nodes": len(nodes)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["data"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import ray

    ray.init()  # RAY_ADDRESS: the step's cluster
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")  # set for a submitted Ray job's driver
    report = {"address": os.environ.get("RAY_ADDRESS"), "host": socket.gethostname(),
              "nodes": len([n for n in ray.nodes() if n["Alive"]]),
              "submission_id": job.get("metadata", {}).get("job_submission_id"),
              "job_id": ray.get_runtime_context().get_job_id(), "cwd": os.getcwd()}
    report.update(data(args.out))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(report, fh)
    print("report", json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
