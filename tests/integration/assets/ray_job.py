"""A Ray job for the local RayJob tests: ``data`` squares numbers with Ray Data across the cluster's nodes,
``train`` fits y = 3x + 1 with Ray Train's TorchTrainer (2 gloo workers on CPU). Writes a JSON report."""

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


def train_loop(config: dict) -> None:
    import torch
    from ray import train

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    y = 3 * x + 1
    first = None
    for epoch in range(config["epochs"]):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        if epoch % 10 == 9:
            train.report({"loss": loss.item(), "epoch": epoch})
    context = train.get_context()
    if context.get_world_rank() == 0:  # the driver's Result carries metrics only with checkpoints in Train v2
        with open(config["metrics"], "w") as fh:
            json.dump({"first_loss": first, "last_loss": loss.item(), "world_size": context.get_world_size()}, fh)


def train(out: str) -> dict:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    storage = os.path.join(os.path.dirname(out), "ray-results")
    metrics = os.path.join(os.path.dirname(out), "train-metrics.json")
    trainer = TorchTrainer(train_loop, train_loop_config={"epochs": 60, "metrics": metrics},
                           scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                           torch_config=TorchConfig(backend="gloo"),
                           run_config=RunConfig(storage_path=storage, name="fit"))
    trainer.fit()
    with open(metrics) as fh:
        return json.load(fh)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["data", "train"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import ray

    ray.init()  # RAY_ADDRESS: the step's cluster
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")  # set for a submitted Ray job's driver
    report = {"address": os.environ.get("RAY_ADDRESS"), "host": socket.gethostname(),
              "nodes": len([n for n in ray.nodes() if n["Alive"]]),
              "submission_id": job.get("metadata", {}).get("job_submission_id"),
              "job_id": ray.get_runtime_context().get_job_id(), "cwd": os.getcwd()}
    report.update(data(args.out) if args.mode == "data" else train(args.out))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(report, fh)
    print("report", json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
