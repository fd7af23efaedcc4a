"""Generate answers for a test set with the newest fine-tuned checkpoint, then score them against the labels.

The model is the newest ``checkpoint-<N>`` under ``--checkpoints_dir`` (default ``$HOME/results/<base_model>``)
with its trained weights loaded onto ``--model_path`` (LoRA merged), exactly as ``convert_checkpoint_to_hf.py``
builds it. The prompts are the ``input`` fields of ``--test_path`` (default: the first ``test.jsonl`` found under
``$HOME/datasets``), the labels its ``output`` fields; at most ``--max_samples`` rows, in chunks of ``--batch_size``.

Generation uses vLLM when it is importable and starts (the merged model is saved to a temporary directory for it),
else ``transformers`` ``generate``; the log says which (``MLRECIPE_GENERATOR=transformers|vllm`` forces one).
Sampling: ``--temperature`` <= 0 is greedy (top_p then 1); ``--top_k`` <= 0 means no top-k.

Scoring uses BERTScore through ``evaluate`` when the metric and its model load offline, else local metrics computed
here (token F1 and ROUGE-L F1); the log says which. Writes ``<checkpoint-N>/predictions.jsonl`` (one
``{"input", "label", "prediction"}`` per line) and ``<checkpoint-N>/evaluation.json`` (generator, metric, scores).

Flags are family T: booleans take a string value and any non-empty value is true (``--full_ft=False`` is true, as
in the reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.accelerate.common import (
    DEFAULT_LORA_TARGETS,
    check_model_source,
    comma_list,
    dataclass_parser,
    latest_checkpoint,
    load_tokenizer,
    log,
    offline_defaults,
    results_dir,
    run_main,
)
from mlrecipe_scripts.core.answer_metrics import rouge_l_f1, token_f1  # noqa: F401 - this script's metrics (and the tests')
from mlrecipe_scripts.hf_trainer import eval_common
from mlrecipe_scripts.hf_trainer.eval_common import (
    Sampling,
    generate,
    parse_family_t,
    read_test_rows,
    score,  # noqa: F401 - this script's scoring (and the tests')
    write_results,
)


@dataclass
class EvalArguments:
    """Flags (family T: typed; booleans are strings, truthy when non-empty)."""

    model_path: str | None = None
    base_model: str = "Qwen/Qwen3-8B"
    checkpoints_dir: str | None = None
    full_ft: bool = False
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: str = DEFAULT_LORA_TARGETS
    test_path: str | None = None
    max_samples: int = 1024
    batch_size: int = 128
    temperature: float = 0.1
    top_k: int = -1
    top_p: float = 0.95
    max_tokens: int = 512
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
    """``--test_path``, else the first ``test.jsonl`` (sorted) under ``$HOME/datasets``."""
    return eval_common.find_test_file(test_path, home, newest=False)


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Evaluate the newest checkpoint; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if args.model_path else "--base_model"
    model_path = check_model_source(args.model_path or args.base_model, flag)
    checkpoints_dir = Path(args.checkpoints_dir).expanduser() if args.checkpoints_dir else results_dir(args.base_model)
    ckpt = latest_checkpoint(checkpoints_dir)
    test_file = find_test_file(args.test_path)
    rows = read_test_rows(test_file, args.max_samples)
    log(f"checkpoint {ckpt}; base model {model_path}; {len(rows)} test rows from {test_file}")

    from mlrecipe_scripts.accelerate.convert_checkpoint_to_hf import load_trained_model

    trained = load_trained_model(ckpt, model_path, flag, full_ft=args.full_ft, lora_rank=args.lora_rank,
                                 lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                                 lora_target_modules=comma_list(args.lora_target_modules))
    model = trained.merged()
    tokenizer = load_tokenizer(model_path, flag=flag)
    log(f"loaded {trained.tensors_loaded} tensors from {trained.source} ({trained.kind})")
    prompts = [row["input"] for row in rows]
    sampling = Sampling.from_args(args)
    predictions, generator = generate(model, tokenizer, prompts, args, sampling)
    out = write_results(ckpt, test_file, rows, predictions, generator, sampling)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
