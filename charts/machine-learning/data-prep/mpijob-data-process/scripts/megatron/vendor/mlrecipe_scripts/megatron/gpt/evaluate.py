"""``gpt/evaluate.py``: held-out perplexity of the newest pretraining checkpoint against an untrained model of the
same shape (same initialization seed), on the test split (``--split`` of the training run) of the same data.

Reads every checkpoint layout ``gpt/export_hf.py`` reads (its :func:`~.export_hf.read_checkpoint`): the plain-torch
GPT's file, and megatron-core's ``GPTModel`` as this project's file, Megatron's ``mp_rank_NN/`` tensor-parallel
shards (merged) or megatron-core's distributed checkpoint (``torch_dist``). A megatron-core model runs as the
plain-torch GPT with an untied output layer: the same architecture (:mod:`.hf_mapping`), its tensors mapped through
the Hugging Face names. On a GPU when one is visible, else on CPU, in float32.

Prints both perplexities, appends them to ``$MLRECIPE_METRICS_FILE`` and writes ``--output`` (JSON). Exit status 1
when the trained model's perplexity is not below ``--max-ratio`` x the untrained one's (it did not learn).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlrecipe_scripts.core.script_core import ScriptError, offline_defaults, run_main

if TYPE_CHECKING:
    import torch
    from torch import nn

#: What a checkpoint's saved args must give for the evaluation data, when they do not (Megatron-LM's own args
#: have no ``data_manifest``): Megatron-LM's defaults.
ARG_DEFAULTS: dict[str, Any] = {"data_path": None, "data_manifest": None, "data_dir": None, "split": "969,30,1",
                                "seed": 1234}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpt/evaluate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--load", required=True, help="the pretraining's --save folder")
    p.add_argument("--split-name", default="test", choices=("valid", "test"))
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--max-ratio", type=float, default=0.5, help="trained/untrained perplexity must be below this")
    p.add_argument("--output", help="write the figures here (JSON)")
    return p


def perplexity(model: nn.Module, source: object, batches: int, size: int, device: torch.device) -> float:
    import torch

    from mlrecipe_scripts.megatron.gpt.model import lm_loss

    total = 0.0
    with torch.no_grad():
        for i in range(batches):
            batch = torch.from_numpy(source.batch(i * size, size)).to(device)  # type: ignore[attr-defined]
            total += float(lm_loss(model, batch))
    return math.exp(min(total / batches, 50.0))


def torch_gpt_state(ckpt: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The plain-torch GPT's state dict of a checkpoint read by :func:`.export_hf.read_checkpoint`, and whether its
    output layer is untied (megatron-core's ``output_layer``): megatron-core's tensors go to Hugging Face's names
    and from there to the plain-torch GPT's (:mod:`.hf_mapping`'s two tables), in float32."""
    from mlrecipe_scripts.megatron.gpt import hf_mapping

    if ckpt["impl"] == "torch":
        return {k: v.float() for k, v in ckpt["model"].items()}, False
    model = {k: v.float() for k, v in hf_mapping.megatron_names(ckpt["model"]).items()}
    layers, heads = int(ckpt["shape"]["num_layers"]), int(ckpt["shape"]["num_attention_heads"])
    try:
        hf = hf_mapping.to_hf(model, hf_mapping.MEGATRON_GPT, layers, heads)
        state = hf_mapping.from_hf(hf, hf_mapping.TORCH_GPT, layers, heads)
    except hf_mapping.MappingError as exc:
        raise ScriptError(f"{ckpt['folder']}: {exc}") from None
    if "lm_head.weight" in hf:
        state["output.weight"] = hf["lm_head.weight"]
    return state, "lm_head.weight" in hf


def main(argv: list[str] | None = None) -> int:
    offline_defaults()
    args = build_parser().parse_args(argv)
    import torch

    from mlrecipe_scripts.megatron.gpt.export_hf import read_checkpoint
    from mlrecipe_scripts.megatron.gpt.model import Shape, TorchGPT
    from mlrecipe_scripts.megatron.gpt.pretrain import resolve_blend
    from mlrecipe_scripts.megatron.gpt.samples import BlendedSamples, parse_split

    ckpt = read_checkpoint(Path(args.load), None)
    iteration = int(ckpt["iteration"])
    train_args = argparse.Namespace(**{**ARG_DEFAULTS, **ckpt["args"]})
    fields = {f.name for f in dataclasses.fields(Shape)}
    shape = Shape(**{k: v for k, v in ckpt["shape"].items() if k in fields})
    state, untied = torch_gpt_state(ckpt)
    del ckpt["model"]  # the checkpoint's own copy: only the float32 state is used from here
    if not (train_args.data_path or train_args.data_manifest):
        raise ScriptError(f"{ckpt['folder']}: the checkpoint's args name no --data-path or --data-manifest to "
                          "evaluate on")
    blend = resolve_blend(train_args)
    count = args.batches * args.micro_batch_size
    samples = BlendedSamples(blend.prefixes, blend.weights, parse_split(train_args.split), args.split_name,
                             shape.seq_length, train_args.seed + 2000, count)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(train_args.seed)
    untrained = TorchGPT(shape, untied).to(device).eval()
    trained = TorchGPT(shape, untied)
    trained.load_state_dict(state)
    trained.to(device).eval()
    base = perplexity(untrained, samples, args.batches, args.micro_batch_size, device)
    tuned = perplexity(trained, samples, args.batches, args.micro_batch_size, device)
    figures = {"split": args.split_name, "samples": count, "iteration": iteration, "perplexity": tuned,
               "untrained_perplexity": base, "ratio": tuned / base, "impl": ckpt["impl"],
               "checkpoint": ckpt["folder"], "device": device.type}
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
