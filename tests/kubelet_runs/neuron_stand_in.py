"""A CPU stand-in for neuronx-distributed's ``examples/training/llama/tp_zero1_llama_hf_pretrain/
tp_zero1_llama_hf_pretrain.py``, committed at that path in the local git repository the ``examples/eks/neuron`` test
clones (its ``git.repo_url``). Neuron's compiler and runtime cannot run here (no Neuron device, no neuronx wheels):
this program does what the harness can check around them, with torch on CPU.

Started by ``torchrun`` as the recipe's launcher renders it, each rank: parses the recipe's args as the real script
names them (``--tensor_parallel_size``, ``--seq_len``, ``--checkpoint_dir``); joins the process group over gloo
(``env://``: torchrun's ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``) and all-reduces ``rank + 1``;
then, as torch-neuronx behaves:

- with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` (the compile step) it writes its graph into the Neuron persistent cache
  (``MODULE_<hash>/graph-rank-<rank>.json``, the hash of the model settings and world size) and no checkpoint;
- without it (the pretrain step) it looks for its graph in that cache (a hit means it finds what the compile step
  extracted) and saves a checkpoint ``<checkpoint_dir>/step_1/rank-<rank>.pt``; rank 0 then writes
  ``<checkpoint_dir>/newest`` once every rank saved.

The cache is where torch-neuronx puts it: ``--cache_dir`` in ``NEURON_CC_FLAGS``, else ``NEURON_COMPILE_CACHE_URL``,
else ``/var/tmp/neuron-compile-cache`` (Neuron's default, in the container's own file system).

Every rank writes what it saw (its env, parsed args, all-reduce result, cache, script path and working directory) to
``$HOME/neuron-stand-in/<MLRECIPE_STEP>/rank-<rank>.json`` for the test to check. Standard library and torch only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist

DEFAULT_CACHE = "/var/tmp/neuron-compile-cache"
#: The env the test checks: torchrun's, the training operator's (PET_*, MASTER_*, WORLD_SIZE, RANK), the recipe's.
SEEN = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "MASTER_ADDR",
        "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "GROUP_RANK", "HOME", "FI_PROVIDER",
        "FI_EFA_USE_DEVICE_RDMA", "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS", "NEURON_EXTRACT_GRAPHS_ONLY",
        "NEURON_CC_FLAGS", "GIT_CLONE_DIR", "MLRECIPE_STEP")


def cache_dir(env: os._Environ[str] | dict[str, str]) -> str:
    """The Neuron persistent cache torch-neuronx would use with ``env``."""
    flags = env.get("NEURON_CC_FLAGS", "").split()
    for i, flag in enumerate(flags):
        if flag.startswith("--cache_dir="):
            return flag.split("=", 1)[1]
        if flag == "--cache_dir" and i + 1 < len(flags):
            return flags[i + 1]
    return env.get("NEURON_COMPILE_CACHE_URL") or DEFAULT_CACHE


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensor_parallel_size", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--checkpoint_dir", type=str, default=None)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)

    extract = os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1"
    settings = {"tensor_parallel_size": args.tensor_parallel_size, "seq_len": args.seq_len, "world_size": world}
    module = Path(cache_dir(os.environ)) / f"MODULE_{hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:20]}"
    graph = module / f"graph-rank-{rank}.json"
    report: dict = {"mode": "extract-graphs" if extract else "train", "args": vars(args), "rank": rank,
                    "world_size": world, "all_reduce": total.item(), "hostname": socket.gethostname(),
                    "script": os.path.abspath(__file__), "cwd": os.getcwd(), "cache": str(module),
                    "env": {k: os.environ.get(k) for k in SEEN}}
    if extract:
        module.mkdir(parents=True, exist_ok=True)
        graph.write_text(json.dumps(settings))
        print(f"rank {rank}/{world}: extracted graph to {graph}", flush=True)
    else:
        report["cache_hit"] = graph.is_file()
        print(f"rank {rank}/{world}: graph {'found in' if report['cache_hit'] else 'not in'} the cache {module}",
              flush=True)
        if not args.checkpoint_dir:
            sys.exit("--checkpoint_dir is required to save a checkpoint")
        step = Path(args.checkpoint_dir) / "step_1"
        step.mkdir(parents=True, exist_ok=True)
        torch.save({"rank": rank, "all_reduce": total.item(), "settings": settings}, step / f"rank-{rank}.pt")
        dist.barrier()
        if rank == 0:
            (Path(args.checkpoint_dir) / "newest").write_text("step_1\n")
        print(f"rank {rank}/{world}: checkpoint saved to {step}", flush=True)
    out = Path(os.environ["HOME"]) / "neuron-stand-in" / os.environ.get("MLRECIPE_STEP", "step") / f"rank-{rank}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
