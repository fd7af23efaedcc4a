"""A tiny DDP training job for ``benchmarks/bench_first_step.py``; run it under torchrun.

It trains a small MLP on random data with DistributedDataParallel (gloo on CPU, NCCL on CUDA) and writes one JSON
line to ``--stamp`` (rank 0 only) with wall-clock times (``time.time()``): ``start`` (this script began, before
``import torch``), ``first_step`` (the first optimizer step completed, the device synchronized), ``end`` (the last
step completed), ``steps`` (how many were run) and ``ancestors`` (the parent processes' command lines, start
times and pids, read after the timed part, for a breakdown of the launch). ``--steps N`` runs N steps after the
first one; ``--seconds S`` runs steps for S seconds after the first one instead (used to calibrate a step count).

Device: ``--device``, else ``MLRECIPE_DEVICE`` (set by the local backend), else CUDA when available; on CUDA rank
``LOCAL_RANK`` takes ``cuda:LOCAL_RANK``.
"""

from __future__ import annotations

import time

START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stamp", required=True, help="file that gets the JSON line of times (rank 0)")
    parser.add_argument("--steps", type=int, default=10, help="steps after the first one")
    parser.add_argument("--seconds", type=float, default=None, help="run for this long after the first step")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    return parser.parse_args()


def pick_device(choice: str | None) -> torch.device:
    name = choice or os.environ.get("MLRECIPE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def ancestors(depth: int = 8) -> list[tuple[str, float, int]]:
    """This process's parents, nearest first: (command line, start time, pid), read after the timed part."""
    try:
        import psutil
    except ImportError:
        return []
    out = []
    proc = psutil.Process().parent()
    while proc is not None and len(out) < depth:
        try:
            out.append((" ".join(proc.cmdline())[:300], proc.create_time(), proc.pid))
            proc = proc.parent()
        except psutil.Error:
            break
    return out


def main() -> None:
    args = parse()
    device = pick_device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(dist.get_rank())
    model = torch.nn.Sequential(
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, 1),
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.hidden, device=device)
    y = torch.randn(args.batch, 1, device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step()
    sync()
    first = time.time()
    done = 1
    if args.seconds is not None:
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            for _ in range(10):
                step()
            sync()
            done += 10
    else:
        for _ in range(args.steps):
            step()
        done += args.steps
    sync()
    end = time.time()
    if dist.get_rank() == 0:
        record = {"start": START, "first_step": first, "end": end, "steps": done, "device": str(device),
                  "world_size": dist.get_world_size(), "ancestors": ancestors()}
        with open(args.stamp, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
