"""Generate answers for ``test.jsonl`` with the newest Lightning checkpoint, then score them.

The newest (by modification time) ``model-*.ckpt`` in ``--checkpoints_dir`` (default
``$HOME/results/<base_model>/checkpoints``) is rebuilt on ``--model_path`` (LoRA or full fine-tuning is detected from
the checkpoint, as in the converter) and merged in memory. Prompts are the ``input`` of the first ``--max_samples``
rows of ``--test_path`` (default: the first ``test.jsonl`` under ``$HOME/datasets``).

* Generation: vLLM (the merged model saved to a temporary directory) when ``vllm`` is importable, else
  transformers ``generate``; ``MLRECIPE_GENERATOR=vllm|transformers`` forces one. temperature <= 0 means greedy
  (top_p 1); top_k <= 0 means off.
* Scoring: BERTScore F1 (``evaluate`` + ``bert-score``, as in the reference) when it is installed and its model can
  be loaded; otherwise, and with ``MLRECIPE_METRIC=local``, local metrics computed here: SQuAD-style token-overlap
  F1 and ROUGE-L F1. The log says which metric was used.

Writes ``<checkpoint minus .ckpt>.jsonl`` (one ``{"input", "label", "prediction"}`` per line) and
``<checkpoint minus .ckpt>.evaluation.json`` (generator, metric, scores, sampling).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.evaluation import Sampling, generate, json_lines
from mlrecipe_scripts.pytorch_lightning.ptl_common import (
    DEFAULT_LORA_TARGETS,
    ScriptError,
    add_flags,
    atomic_file,
    check_model_source,
    load_tokenizer,
    log,
    newest_checkpoint,
    offline_defaults,
    report_progress,
    run_main,
    score,
    sibling_path,
)


@dataclass
class EvalConfig:
    """Flags (family T: typed ``--<field>``), in the reference's order."""

    model_path: str | None = None
    base_model: str = "Qwen/Qwen3-8B"
    checkpoints_dir: str | None = None
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: str = DEFAULT_LORA_TARGETS
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


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (family T)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flags(parser, EvalConfig)
    return parser


def parse_args(argv: list[str] | None = None) -> EvalConfig:
    """Parse the command line (strict: an unknown flag exits with status 2) and check the numbers."""
    parser = build_parser()
    config = EvalConfig(**vars(parser.parse_args(argv)))
    for name in ("max_samples", "max_tokens", "batch_size", "tensor_parallel_size", "max_model_len"):
        if getattr(config, name) < 1:
            parser.error(f"--{name}={getattr(config, name)}: must be at least 1")
    return config


# --------------------------------------------------------------------------------------------------------------
# data


def find_test_file(test_path: str | None) -> Path:
    """``--test_path``, else the first (sorted) ``test.jsonl`` under ``$HOME/datasets``."""
    if test_path:
        path = Path(test_path).expanduser()
        if not path.is_file():
            raise ScriptError(f"--test_path={test_path}: no such file")
        return path
    root = Path.home() / "datasets"
    found = sorted(root.rglob("test.jsonl")) if root.is_dir() else []
    if not found:
        raise ScriptError(f"no test.jsonl under {root}; pass --test_path")
    log(f"found test file {found[0]}")
    return found[0]


def read_test_rows(path: Path, max_samples: int) -> list[dict[str, str]]:
    """The first ``max_samples`` rows as ``{"input", "label"}`` (``label`` is the row's ``output``)."""
    rows: list[dict[str, str]] = []
    for number, row in json_lines(path, max_samples):
        if not isinstance(row, dict) or "input" not in row:
            raise ScriptError(f"{path}:{number}: no 'input' field")
        rows.append({"input": str(row.get("input") or ""), "label": str(row.get("output") or "")})
    if not rows:
        raise ScriptError(f"{path}: the test set is empty")
    return rows


# --------------------------------------------------------------------------------------------------------------
# generation


def cuda_dtype(flag: str) -> Any | None:
    """The dtype ``transformers`` generates in on CUDA (``--dtype``; bfloat16 for another value), None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "half": torch.float16,
            "float32": torch.float32}.get(flag, torch.bfloat16)


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Generate, write the predictions, score; returns the exit status."""
    config = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if config.model_path else "--base_model"
    model_path = check_model_source(config.model_path or config.base_model, flag)
    from mlrecipe_scripts.pytorch_lightning.convert_checkpoint_to_hf import (
        default_checkpoints_dir,
        load_trained_model,
        lora_flags,
    )

    checkpoints = Path(config.checkpoints_dir).expanduser() if config.checkpoints_dir else \
        default_checkpoints_dir(config.base_model)
    ckpt = newest_checkpoint(checkpoints)
    test_file = find_test_file(config.test_path)
    rows = read_test_rows(test_file, config.max_samples)
    log(f"checkpoint {ckpt}; base model {model_path}; {len(rows)} test rows from {test_file}")
    trained = load_trained_model(ckpt, model_path, flag, lora_flags(config))
    log(f"loaded {trained.tensors_loaded} tensors ({trained.kind})")
    model = trained.merged()
    tokenizer = load_tokenizer(model_path, flag)
    prompts = [row["input"] for row in rows]
    sampling = Sampling.from_args(config)
    predictions, generator = generate(model, tokenizer, prompts, config, sampling, cuda_dtype(config.dtype))

    out = sibling_path(ckpt, ".jsonl")
    with atomic_file(out) as tmp_file, open(tmp_file, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"input": row["input"], "label": row["label"], "prediction": prediction},
                                 ensure_ascii=False) + "\n" for row, prediction in zip(rows, predictions, strict=True))
    log(f"wrote {out}")
    for i, (row, prediction) in enumerate(zip(rows[:3], predictions, strict=False), 1):
        log(f"--- sample {i}\ninput: {row['input'][:200]!r}\nlabel: {row['label'][:200]!r}\n"
            f"prediction: {prediction[:200]!r}")
    metric, scores = score(predictions, [row["label"] for row in rows])
    log(f"metric: {metric}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    summary = {"checkpoint": str(ckpt), "test_path": str(test_file), "samples": len(rows), "generator": generator,
               "metric": metric, "scores": scores, "sampling": asdict(sampling), "predictions": str(out)}
    with atomic_file(sibling_path(ckpt, ".evaluation.json")) as tmp_file:
        tmp_file.write_text(json.dumps(summary, indent=2) + "\n")
    report_progress(None, None, **scores)
    return 0


if __name__ == "__main__":
    run_main(main)
