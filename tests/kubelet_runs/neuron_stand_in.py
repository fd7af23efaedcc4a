"""A CPU stand-in for neuronx-distributed's ``examples/training/llama/tp_zero1_llama_hf_pretrain/
tp_zero1_llama_hf_pretrain.py``, committed at that path in the local git repository the ``examples/eks/neuron`` test
clones (its ``git.repo_url``), beside the stand-ins of the modules it imports (``tests/kubelet_runs/
neuronx_distributed/``). Neuron's compiler and runtime cannot run here (no Neuron device, no neuronx wheels): this
program keeps the real script's interface and does what the harness can check around them, with torch on CPU.

The real script, started by ``torchrun`` on every NeuronCore: imports ``logger`` (beside it in the repository),
``modeling_llama_nxd`` and ``training_utils`` (in ``examples/training/llama/``, which the recipes copy next to it);
reads the model config in ``--model_path``; builds the tensor-parallel (``--tensor_parallel_size``, which must
divide the world size) ZeRO-1 Llama; reads the tokenized dataset in ``--data_dir`` (``load_from_disk``, asserted to
exist) sharded over the data-parallel ranks; trains ``--steps_this_run`` steps (``-1``: ``--max_steps``; it compares
``steps_this_run < 0``, so a missing one fails) of ``--grad_accum_usteps`` micro-batches of ``--batch_size``; saves
``<checkpoint_dir>/step_<n>`` every ``--checkpoint_freq`` steps keeping ``--num_kept_checkpoint``, ``newest``
naming the latest, and with ``--loading_step latest_if_exists`` resumes from it. torch-neuronx compiles each traced
graph unless the Neuron persistent cache has it compiled; with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` (set by
``neuron_parallel_compile``) it only writes the graphs into the cache and the run's outputs are meaningless.

This one, each rank: parses the same flags (an unknown one fails as argparse does); exits non-zero with one
``error:`` line when ``--model_path``, ``--data_dir``, ``--max_steps`` or ``--steps_this_run`` is missing, when a
module the real one imports is not next to it, when the model config or the dataset is not where it is pointed,
when the tensor-parallel size does not divide the world, or when a token id is past the config's vocabulary; joins
the process group over gloo (``env://``, torchrun's env) and reads its data-parallel shard through
``training_utils.create_llama_pretraining_dataset``, micro-batch by micro-batch, all-reducing each step's token
count. Its "graph" is a hash of what shapes the real graphs (the model config, parallelism, batch and row shapes,
precision flags, world size) and of the compiler flags (``NEURON_CC_FLAGS`` without ``--cache_dir``), kept where
torch-neuronx keeps it: ``<cache>/neuronxcc-stand-in/MODULE_<graph>+<flags>/``, the cache being ``--cache_dir`` in
``NEURON_CC_FLAGS``, else ``NEURON_COMPILE_CACHE_URL``, else ``/var/tmp/neuron-compile-cache``.

- with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` it writes ``model.hlo_module.pb`` and ``compile_flags.json`` there and no
  checkpoint;
- without it, it looks the graph up (``cache_hit``: ``model.neff`` and ``model.done`` there, i.e. compiled, not only
  extracted; a real run would compile a missing one just in time), resumes from ``newest`` with
  ``--loading_step latest_if_exists``, and saves ``<checkpoint_dir>/step_<n>/rank-<rank>.pt`` every
  ``--checkpoint_freq`` steps; rank 0 then writes ``newest`` and removes the checkpoints past
  ``--num_kept_checkpoint``.

Every rank writes what it saw (env, args, dataset, steps, cache, script path and working directory) to
``$HOME/neuron-stand-in/<MLRECIPE_STEP>/rank-<rank>.json`` for the test to check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import sys
from pathlib import Path

DEFAULT_CACHE = "/var/tmp/neuron-compile-cache"
#: Modules the real script imports from its own folder (``logger`` is there in the repository, the others are
#: copied there from ``examples/training/llama/`` by the recipe).
MODULES = ("logger", "modeling_llama_nxd", "training_utils")
REQUIRED = ("model_path", "data_dir", "max_steps", "steps_this_run")
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


def compiler_flags(env: os._Environ[str] | dict[str, str]) -> list[str]:
    """``NEURON_CC_FLAGS`` without the cache's place (the flags that change what the compiler makes)."""
    flags, out = env.get("NEURON_CC_FLAGS", "").split(), []
    skip = False
    for flag in flags:
        if skip:
            skip = False
        elif flag == "--cache_dir":
            skip = True
        elif not flag.startswith("--cache_dir="):
            out.append(flag)
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The real script's flags (those the recipes use and the ones shaping its graphs), with its defaults."""
    parser = argparse.ArgumentParser()
    for name in ("--model_path", "--data_dir", "--checkpoint_dir"):
        parser.add_argument(name, type=str, default=None)
    parser.add_argument("--output_dir", type=str, default="./output")
    parser.add_argument("--metrics_file", type=str, default="results.json")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_steps", type=int, default=None)
    parser.add_argument("--steps_this_run", type=int, default=None)
    parser.add_argument("--seed", type=int, default=12349)
    parser.add_argument("--lr", type=float, default=4e-4)
    parser.add_argument("--warmup_steps", type=int, default=2000)
    parser.add_argument("--grad_accum_usteps", type=int, default=64)
    parser.add_argument("--tensor_parallel_size", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--logging_interval", type=int, default=1)
    parser.add_argument("--checkpoint_freq", type=int, default=100000)
    parser.add_argument("--loading_step", type=str, default="-1")
    parser.add_argument("--num_kept_checkpoint", type=int, default=-1)
    for flag in ("--use_mix_precision", "--use_zero_1", "--sequence_parallel_enabled",
                 "--selective_checkpoint_enabled", "--qkv_linear", "--print_grad_norm", "--use_meta_device_init",
                 "--pretrained_weight"):
        parser.add_argument(flag, action="store_true")
    args = parser.parse_args(argv)
    missing = [f"--{name}" for name in REQUIRED if getattr(args, name) is None]
    if missing:
        sys.exit(f"error: {', '.join(missing)} not given: the real script needs them (a model config folder, a "
                 "tokenized dataset, the step counts: it compares steps_this_run < 0)")
    return args


def imported_modules(script: Path) -> None:
    """Import the modules the real script imports from its folder; one ``error:`` line when one is not there."""
    missing = [m for m in MODULES if not script.with_name(f"{m}.py").is_file()]
    if missing:
        sys.exit(f"error: {', '.join(f'{m}.py' for m in missing)} not in {script.parent}: the script imports "
                 "them from its own folder (the recipe copies examples/training/llama/*.py there)")
    import logger  # noqa: F401
    import modeling_llama_nxd  # noqa: F401


def model_config(model_path: str) -> dict:
    config = Path(model_path) / "config.json"
    if not config.is_file():
        sys.exit(f"error: --model_path {model_path}: no config.json there (the real script reads LlamaConfig from it)")
    values = json.loads(config.read_text())
    if values.get("model_type") != "llama":
        sys.exit(f"error: {config}: model_type {values.get('model_type')!r}, not llama")
    return values


def graph_dir(cache: str, settings: dict, flags: list[str]) -> Path:
    """Where torch-neuronx's cache keeps the graph of ``settings`` compiled with ``flags``."""
    graph = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]
    flag_hash = hashlib.sha256(json.dumps(flags).encode()).hexdigest()[:8]
    return Path(cache) / "neuronxcc-stand-in" / f"MODULE_{graph}+{flag_hash}"


def newest_step(checkpoint_dir: str | None) -> int:
    """The step of ``<checkpoint_dir>/newest`` (0 when there is none)."""
    newest = Path(checkpoint_dir or "/nonexistent") / "newest"
    return int(newest.read_text().strip().removeprefix("step_")) if newest.is_file() else 0


def main() -> int:
    script = Path(os.path.abspath(__file__))
    args = parse_args(sys.argv[1:])
    if args.steps_this_run < 0:
        args.steps_this_run = args.max_steps
    imported_modules(script)
    config = model_config(args.model_path)
    if not os.path.exists(os.path.expanduser(args.data_dir)):
        sys.exit(f"error: --data_dir {args.data_dir} does not exist (the real script asserts it)")

    import torch
    import torch.distributed as dist
    import training_utils

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.tensor_parallel_size:
        sys.exit(f"error: --tensor_parallel_size {args.tensor_parallel_size} does not divide the world size {world}")
    dp_size = world // args.tensor_parallel_size
    loader, _ = training_utils.create_llama_pretraining_dataset(
        args.data_dir, args.batch_size, dp_size, rank // args.tensor_parallel_size, args.seed)
    first = next(iter(loader))
    row_shape = list(first["input_ids"].shape)
    if int(first["input_ids"].max()) >= config["vocab_size"]:
        sys.exit(f"error: token id {int(first['input_ids'].max())} past the model's vocab_size {config['vocab_size']}")

    extract = os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1"
    settings = {"config": config, "tensor_parallel_size": args.tensor_parallel_size, "world_size": world,
                "batch": row_shape, "grad_accum_usteps": args.grad_accum_usteps, "seq_len": args.seq_len,
                **{k: getattr(args, k) for k in ("use_mix_precision", "use_zero_1", "sequence_parallel_enabled",
                                                 "selective_checkpoint_enabled", "qkv_linear")}}
    module = graph_dir(cache_dir(os.environ), settings, compiler_flags(os.environ))
    report: dict = {"mode": "extract-graphs" if extract else "train", "args": vars(args), "rank": rank,
                    "world_size": world, "dp_size": dp_size, "batch_shape": row_shape,
                    "dataset_rows": len(loader.dataset), "hostname": socket.gethostname(), "script": str(script),
                    "cwd": os.getcwd(), "cache": str(module), "env": {k: os.environ.get(k) for k in SEEN}}
    if extract:
        module.mkdir(parents=True, exist_ok=True)
        (module / "model.hlo_module.pb").write_text(json.dumps(settings, sort_keys=True))
        (module / "compile_flags.json").write_text(json.dumps(compiler_flags(os.environ)))
        print(f"rank {rank}/{world}: graph extracted to {module}", flush=True)
    else:
        report["cache_hit"] = (module / "model.neff").is_file() and (module / "model.done").is_file()
        print(f"rank {rank}/{world}: graph {'compiled in' if report['cache_hit'] else 'not compiled in'} the cache "
              f"{module}", flush=True)

    start = newest_step(args.checkpoint_dir) if args.loading_step == "latest_if_exists" and not extract else 0
    report["resumed_from"], report["tokens"], saved = start, [], []
    step, batches = start, iter(loader)
    while step < args.steps_this_run:
        tokens = torch.zeros(1)
        for _ in range(args.grad_accum_usteps):
            batch = next(batches, None)
            if batch is None:  # the next epoch
                batches = iter(loader)
                batch = next(batches)
            tokens += int(batch["attention_mask"].sum())
        dist.all_reduce(tokens)
        step += 1
        report["tokens"].append(tokens.item())
        if not extract and args.checkpoint_freq > 0 and step % args.checkpoint_freq == 0 and args.checkpoint_dir:
            saved.append(save_checkpoint(args, rank, step, dist))
    report["steps"], report["checkpoints_saved"] = step, saved
    out = Path(os.environ["HOME"]) / "neuron-stand-in" / os.environ.get("MLRECIPE_STEP", "step") / f"rank-{rank}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    dist.destroy_process_group()
    return 0


def save_checkpoint(args: argparse.Namespace, rank: int, step: int, dist) -> str:
    """Save this rank's part of ``step_<step>``; rank 0 names it ``newest`` once every rank saved and removes the
    checkpoints past ``--num_kept_checkpoint``."""
    import torch

    root = Path(args.checkpoint_dir)
    tag = root / f"step_{step}"
    tag.mkdir(parents=True, exist_ok=True)
    torch.save({"rank": rank, "step": step}, tag / f"rank-{rank}.pt")
    dist.barrier()
    if rank == 0:
        (root / "newest").write_text(f"step_{step}\n")
        if args.num_kept_checkpoint > 0:
            kept = sorted((p for p in root.glob("step_*") if p.is_dir()), key=lambda p: int(p.name[5:]))
            for old in kept[:-args.num_kept_checkpoint]:
                shutil.rmtree(old)
    dist.barrier()
    print(f"rank {rank}: checkpoint step_{step} saved to {root}", flush=True)
    return tag.name


if __name__ == "__main__":
    sys.exit(main())
