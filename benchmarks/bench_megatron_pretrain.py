"""Pretraining speed of ``framework: megatron``'s ``gpt/pretrain.py`` vs a minimal hand-written loop, same run.

Data: one Megatron indexed dataset made here through the data step's own writer (``--documents`` documents of
random token ids, 2,048-token vocabulary), with a manifest in the data step's schema.

* ``script``: the chart tree's ``gpt/pretrain.py --data-manifest ... --train-iters N`` in one process (CPU: the
  plain-torch GPT, the built-in sampler, AdamW with the script's weight-decay groups, the lr schedule, gradient
  clipping, metrics file; no checkpoint and no validation inside the timed window);
* ``loop``: the loop one would write by hand around the same model class (``mlrecipe_scripts.megatron.gpt.model``):
  the ``.bin`` memory-mapped, samples of seq+1 tokens at shuffled offsets, the same batch size, AdamW, clipping.

Both run as separate processes with ``OMP_NUM_THREADS`` = ``--threads``; samples/s counts the steps after the first
``--skip`` (the script's from its metrics file's ``time`` and ``cpu_seconds``, the loop's by its own clocks at the same
points). Samples per CPU second (the process's ``time.process_time()``) is the figure other load on a shared machine
barely moves. Runs
alternate (script, loop, loop, script, ...) ``--repeats`` times; per-pair ratios and their median are printed.
Target: script / loop >= 0.95. Usage: ``python benchmarks/bench_megatron_pretrain.py [--iters 60] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "charts" / "machine-learning" / "training" / "pytorchjob-distributed" / "scripts" / "megatron" / \
    "gpt" / "pretrain.py"
VOCAB = 2048
SHAPE = {"num_layers": 2, "hidden_size": 128, "num_attention_heads": 4, "seq_length": 128}


def make_data(folder: Path, documents: int) -> Path:
    """``bench_00_text_document.bin/.idx`` and ``manifest.json`` (the data step's schema) in ``folder``."""
    import numpy as np

    sys.path.insert(0, str(REPO / "src"))
    from mlrecipe_scripts.megatron.data.indexed import IndexedWriter

    rng = np.random.default_rng(0)
    name = "bench_00_text_document"
    writer = IndexedWriter(folder / f"{name}.bin", np.dtype(np.uint16))
    tokens = 0
    for _ in range(documents):
        doc = rng.integers(1, VOCAB, int(rng.integers(200, 800)), dtype=np.uint16)
        writer.add_document(doc)
        tokens += len(doc)
    writer.finalize(folder / f"{name}.idx")
    entry = {"prefix": name, "documents": documents, "tokens": tokens,
             **{s: {"name": f"{name}.{s}", "bytes": (folder / f"{name}.{s}").stat().st_size} for s in ("bin", "idx")}}
    manifest = {"format": "megatron-indexed-dataset", "prefixes": [entry], "tokenizer": {"vocab_size": VOCAB,
                                                                                         "eod_id": 0}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder / "manifest.json"


def env(threads: int, metrics: Path | None = None) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PYTHONPATH")}
    out["OMP_NUM_THREADS"] = str(threads)
    if metrics is not None:
        out["MLRECIPE_METRICS_FILE"] = str(metrics)
    return out


def run_script(manifest: Path, args: argparse.Namespace, work: Path) -> tuple[float, float]:
    metrics = work / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [sys.executable, str(SCRIPT), "--data-manifest", str(manifest), "--train-iters", str(args.iters),
           "--micro-batch-size", str(args.batch), "--log-interval", str(args.skip), "--split", "100,0,0",
           "--lr", "1e-3", "--lr-warmup-iters", "5", "--make-vocab-size-divisible-by", "128",
           *(f"--{k.replace('_', '-')}={v}" for k, v in SHAPE.items())]
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env(args.threads, metrics))
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    logged = {r["step"]: r for r in rows if "loss" in r.get("metrics", {})}
    samples = (args.iters - args.skip) * args.batch
    first, last = logged[args.skip], logged[args.iters]
    return (samples / (last["time"] - first["time"]),
            samples / (last["metrics"]["cpu_seconds"] - first["metrics"]["cpu_seconds"]))


def run_loop(manifest: Path, args: argparse.Namespace) -> tuple[float, float]:
    cmd = [sys.executable, __file__, "--loop", str(manifest), "--iters", str(args.iters), "--batch", str(args.batch),
           "--skip", str(args.skip)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env(args.threads))
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def loop(manifest: Path, iters: int, batch: int, skip: int) -> tuple[float, float]:
    """The hand-written loop: samples per second and per CPU second over the steps after ``skip``."""
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO / "src"))
    from mlrecipe_scripts.megatron.gpt.model import Shape, TorchGPT

    torch.manual_seed(0)
    data = json.loads(manifest.read_text())
    tokens = np.memmap(manifest.parent / f"{data['prefixes'][0]['prefix']}.bin", dtype=np.uint16, mode="r")
    seq = SHAPE["seq_length"]
    model = TorchGPT(Shape(SHAPE["num_layers"], SHAPE["hidden_size"], SHAPE["num_attention_heads"], seq, VOCAB))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    order = np.random.default_rng(0).permutation((len(tokens) - 1) // seq)
    mark = cpu = 0.0
    for step in range(iters):
        rows = [tokens[i * seq:i * seq + seq + 1] for i in order[step * batch:(step + 1) * batch]]
        batch_tokens = torch.from_numpy(np.stack(rows).astype(np.int64))
        logits = model(batch_tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch_tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        float(loss)
        if step + 1 == skip:
            mark, cpu = time.perf_counter(), time.process_time()
    samples = (iters - skip) * batch
    return samples / (time.perf_counter() - mark), samples / (time.process_time() - cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        print(*loop(Path(args.loop), args.iters, args.batch, args.skip))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manifest = make_data(work, args.documents)
        pairs = []
        for i in range(args.repeats):
            if i % 2 == 0:
                script, hand = run_script(manifest, args, work), run_loop(manifest, args)
            else:
                hand, script = run_loop(manifest, args), run_script(manifest, args, work)
            pairs.append((script, hand))
            print(f"round {i + 1}: script {script[0]:.1f} samples/s ({script[1]:.1f} per CPU s), loop {hand[0]:.1f} "
                  f"samples/s ({hand[1]:.1f} per CPU s), ratio {script[0] / hand[0]:.3f} "
                  f"(per CPU s {script[1] / hand[1]:.3f})", flush=True)
    for k, what in ((0, "samples/s"), (1, "samples per CPU second")):
        print(f"median {what}: script {statistics.median(s[k] for s, _ in pairs):.1f}, loop "
              f"{statistics.median(h[k] for _, h in pairs):.1f}, script/loop "
              f"{statistics.median(s[k] / h[k] for s, h in pairs):.3f}")
    print(f"(target >= 0.95; {args.iters - args.skip} timed steps of batch {args.batch}, seq {SHAPE['seq_length']}, "
          f"{args.threads} thread(s), {args.repeats} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
