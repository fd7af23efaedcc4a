"""``gpt/evaluate.py``: held-out perplexity of the newest pretraining checkpoint against an untrained model of the
same shape (same initialization seed), on the test split (``--split`` of the training run) of the same data.

Prints both perplexities, appends them to ``$MLRECIPE_METRICS_FILE`` and writes ``--output`` (JSON). Exit status 1
when the trained model's perplexity is not below ``--max-ratio`` x the untrained one's (it did not learn).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from mlrecipe_scripts.core.script_core import ScriptError, offline_defaults, run_main

if TYPE_CHECKING:
    from torch import nn


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpt/evaluate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--load", required=True, help="the pretraining's --save folder")
    p.add_argument("--split-name", default="test", choices=("valid", "test"))
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--max-ratio", type=float, default=0.5, help="trained/untrained perplexity must be below this")
    p.add_argument("--output", help="write the figures here (JSON)")
    return p


def perplexity(model: nn.Module, source: object, batches: int, size: int) -> float:
    import torch

    from mlrecipe_scripts.megatron.gpt.model import lm_loss

    total = 0.0
    with torch.no_grad():
        for i in range(batches):
            total += float(lm_loss(model, torch.from_numpy(source.batch(i * size, size))))  # type: ignore[attr-defined]
    return math.exp(min(total / batches, 50.0))


def main(argv: list[str] | None = None) -> int:
    offline_defaults()
    args = build_parser().parse_args(argv)
    import torch

    from mlrecipe_scripts.megatron.gpt import checkpoint
    from mlrecipe_scripts.megatron.gpt.model import Shape, TorchGPT
    from mlrecipe_scripts.megatron.gpt.pretrain import resolve_blend
    from mlrecipe_scripts.megatron.gpt.samples import BlendedSamples, parse_split

    root = Path(args.load)
    iteration = checkpoint.latest(root)
    if iteration is None:
        raise ScriptError(f"--load {root}: no checkpoint")
    state = checkpoint.load(root, iteration)
    if state.get("impl") != "torch":
        raise ScriptError(f"{checkpoint.folder(root, iteration)}: a megatron-core checkpoint; this evaluator reads the "
                          "plain-torch GPT's")
    train_args = argparse.Namespace(**state["args"])
    shape = Shape(**state["shape"])
    blend = resolve_blend(train_args)
    count = args.batches * args.micro_batch_size
    samples = BlendedSamples(blend.prefixes, blend.weights, parse_split(train_args.split), args.split_name,
                             shape.seq_length, train_args.seed + 2000, count)
    torch.manual_seed(train_args.seed)
    untrained = TorchGPT(shape).eval()
    trained = TorchGPT(shape)
    trained.load_state_dict(state["model"])
    trained.eval()
    base = perplexity(untrained, samples, args.batches, args.micro_batch_size)
    tuned = perplexity(trained, samples, args.batches, args.micro_batch_size)
    figures = {"split": args.split_name, "samples": count, "iteration": iteration, "perplexity": tuned,
               "untrained_perplexity": base, "ratio": tuned / base}
    print(f"held-out ({args.split_name}) perplexity after {iteration} steps: {tuned:.2f}; untrained model of the same "
          f"shape: {base:.2f} (ratio {tuned / base:.3f})", flush=True)
    from mlrecipe_scripts.core.progress import report_progress

    report_progress(iteration, iteration, test_ppl=tuned, untrained_ppl=base)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(figures, indent=2) + "\n")
    if tuned / base >= args.max_ratio:
        raise ScriptError(f"perplexity {tuned:.2f} is not below {args.max_ratio} x the untrained {base:.2f}")
    return 0


if __name__ == "__main__":
    run_main(main)
