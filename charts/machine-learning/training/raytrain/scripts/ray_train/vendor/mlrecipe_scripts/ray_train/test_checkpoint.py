"""Generate answers for a test set with the newest Ray Train checkpoint, then score them against the labels.

The model is the newest Ray checkpoint under ``--checkpoints_dir`` (default ``$HOME/results/<base_model with / ->
->``; the rule of ``convert_checkpoint_to_hf.py``): a LoRA adapter merged in memory into ``--model_path`` (default
``--base_model``), or a full model. The prompts are the ``input`` fields of ``--test_path`` (default: the newest
``test.jsonl`` under ``$HOME/datasets``), the labels its ``output`` fields; at most ``--max_samples`` rows, in chunks
of ``--batch_size``.

Generation uses vLLM when it is importable and starts (the merged model is saved to a temporary directory for it),
else ``transformers`` ``generate``; the log says which (``MLRECIPE_GENERATOR=transformers|vllm`` forces one).
Sampling: ``--temperature`` <= 0 is greedy (top_p then 1); ``--top_k`` <= 0 means no top-k.

Scoring uses the reference's metric, BERTScore F1 through ``evaluate``, when it loads (offline it needs the metric
and its model in the local cache); else local metrics computed here (token F1 and ROUGE-L F1); the log says which
(``MLRECIPE_METRIC=local`` skips BERTScore). Writes ``<checkpoint>/predictions.jsonl`` (one
``{"input", "label", "prediction"}`` per line) and ``<checkpoint>/evaluation.json`` (generator, metric, scores).

Flags are family T: booleans take a string value and any non-empty value is true. ``--full_ft`` is only compared
with what the checkpoint holds (the files decide). The reference's ``ray.init()`` (unused there) is not done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer import eval_common
from mlrecipe_scripts.hf_trainer.eval_common import Sampling, generate, parse_family_t, read_test_rows, write_results
from mlrecipe_scripts.ray_train.common import (
    check_model_source,
    dataclass_parser,
    default_checkpoints_dir,
    latest_ray_checkpoint,
    log,
    offline_defaults,
    run_main,
)


@dataclass
class EvalArguments:
    """Flags (family T: typed; booleans are strings, truthy when non-empty)."""

    model_path: str | None = None
    base_model: str = "Qwen/Qwen3-8B"
    checkpoints_dir: str | None = None
    full_ft: bool = False
    test_path: str | None = None
    max_samples: int = 1024
    temperature: float = 0.1
    top_k: int = -1
    top_p: float = 0.95
    max_tokens: int = 512
    batch_size: int = 128
    tensor_parallel_size: int = 8
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 8192
    dtype: str = "bfloat16"


def build_parser() -> Any:
    """The argparse parser (family T)."""
    return dataclass_parser(EvalArguments, "T", description=__doc__.split("\n")[0])


def parse_args(argv: list[str] | None = None) -> EvalArguments:
    """Parse the command line (strict: an unknown flag exits with status 2); ``full_ft`` becomes a bool."""
    return parse_family_t(build_parser(), EvalArguments, argv)


# --------------------------------------------------------------------------------------------------------------
# data


def find_test_file(test_path: str | None, home: Path | None = None) -> Path:
    """``--test_path``, else the newest ``test.jsonl`` (by modification time) under ``$HOME/datasets``."""
    return eval_common.find_test_file(test_path, home, newest=True)


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Evaluate the newest checkpoint; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if args.model_path else "--base_model"
    checkpoints_dir = Path(args.checkpoints_dir).expanduser() if args.checkpoints_dir else \
        default_checkpoints_dir(args.base_model)
    ckpt = latest_ray_checkpoint(checkpoints_dir)
    test_file = find_test_file(args.test_path)
    rows = read_test_rows(test_file, args.max_samples)

    from mlrecipe_scripts.ray_train.convert_checkpoint_to_hf import (
        checkpoint_kind,
        checkpoint_tokenizer,
        load_trained_model,
    )

    kind = checkpoint_kind(ckpt, args.full_ft)
    model_path = check_model_source(args.model_path or args.base_model, flag) if kind == "lora" else \
        (args.model_path or args.base_model)
    log(f"checkpoint {ckpt} ({kind}); {len(rows)} test rows from {test_file}")
    model = load_trained_model(ckpt, model_path, flag, args.full_ft).merged()
    tokenizer = checkpoint_tokenizer(ckpt, model_path, flag)
    prompts = [row["input"] for row in rows]
    sampling = Sampling.from_args(args)
    predictions, generator = generate(model, tokenizer, prompts, args, sampling)
    out = write_results(ckpt, test_file, rows, predictions, generator, sampling)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
