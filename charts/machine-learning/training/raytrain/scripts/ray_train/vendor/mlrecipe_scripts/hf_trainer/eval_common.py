"""What the accelerate and the ray_train evaluators (``shared/test_checkpoint.py``) share: reading the test set,
the reference's sampling rules, generation (vLLM when importable, else ``transformers`` ``generate``), scoring and
the result files. What the Lightning evaluators share with these is in :mod:`mlrecipe_scripts.core.evaluation`.

``args`` below is the evaluator's parsed flags (``batch_size``, ``temperature``, ``top_k``, ``top_p``,
``max_tokens``, ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``, ``dtype``).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core import evaluation
from mlrecipe_scripts.core.evaluation import Sampling, bertscore_f1, json_lines, local_scores
from mlrecipe_scripts.hf_trainer.common_base import (
    ScriptError,
    atomic_file,
    home_dir,
    log,
    select_precision,
    short_error,
    truthy_str,
)

# --------------------------------------------------------------------------------------------------------------
# command line, data


def parse_family_t(parser: argparse.ArgumentParser, cls: type, argv: list[str] | None = None) -> Any:
    """``cls`` from the command line (strict: an unknown flag exits with status 2); ``full_ft`` becomes a bool."""
    ns = vars(parser.parse_args(argv))
    raw = ns["full_ft"]
    ns["full_ft"] = truthy_str(raw)
    if isinstance(raw, str) and raw.strip().lower() in ("false", "0", "no", "off"):
        log(f"note: --full_ft={raw} counts as true (any non-empty value does, as in the reference)")
    return cls(**ns)


def find_test_file(test_path: str | None, home: Path | None = None, newest: bool = False) -> Path:
    """``--test_path``, else a ``test.jsonl`` under ``$HOME/datasets``: the first (sorted), or with ``newest`` the
    newest by modification time."""
    if test_path:
        path = Path(test_path).expanduser()
        if not path.is_file():
            raise ScriptError(f"--test_path={test_path}: no such file")
        return path
    root = (home or home_dir()) / "datasets"
    found = sorted(root.rglob("test.jsonl")) if root.is_dir() else []
    if not found:
        raise ScriptError(f"no test.jsonl under {root}; pass --test_path")
    if not newest:
        return found[0]
    chosen = max(found, key=lambda p: (p.stat().st_mtime, str(p)))
    log(f"test set: {chosen} (the newest test.jsonl under {root})")
    return chosen


def read_test_rows(path: Path, max_samples: int) -> list[dict[str, str]]:
    """The first ``max_samples`` rows of a jsonl test set as ``{"input", "label"}``."""
    rows = [{"input": str(row.get("input") or ""), "label": str(row.get("output") or "")}
            for _, row in json_lines(path, max_samples)]
    if not rows:
        raise ScriptError(f"{path}: the test set is empty")
    return rows


# --------------------------------------------------------------------------------------------------------------
# generation


def cuda_dtype(flag: str) -> Any | None:
    """The dtype ``transformers`` generates in on CUDA (``--dtype`` where the GPU supports it), None on the CPU."""
    import torch

    precision = select_precision()
    if precision.device != "cuda":
        return None
    return torch.bfloat16 if flag in ("bfloat16", "bf16") and precision.bf16 else \
        torch.float16 if flag in ("float16", "half", "fp16") else precision.dtype


def generate(model: Any, tokenizer: Any, prompts: list[str], args: Any, sampling: Sampling) -> tuple[list[str], str]:
    """(predictions, generator name): :func:`mlrecipe_scripts.core.evaluation.generate`, on CUDA in
    :func:`cuda_dtype`."""
    return evaluation.generate(model, tokenizer, prompts, args, sampling, cuda_dtype(args.dtype))


# --------------------------------------------------------------------------------------------------------------
# scoring and results


def score(predictions: list[str], references: list[str]) -> tuple[str, dict[str, float]]:
    """(metric description, mean scores): BERTScore F1 when it loads (offline it needs the metric and its model in
    the local cache), else local token F1 and ROUGE-L F1; ``MLRECIPE_METRIC=local`` skips BERTScore."""
    if os.environ.get("MLRECIPE_METRIC", "").lower() != "local":
        try:
            return "bertscore", bertscore_f1(predictions, references)
        except Exception as exc:
            log(f"note: BERTScore (the reference's metric) is not available here ({short_error(exc)}); "
                "using local metrics")
    else:
        log("note: MLRECIPE_METRIC=local: BERTScore skipped")
    return "local (token F1, ROUGE-L F1)", local_scores(predictions, references)


def write_results(ckpt: Path, test_file: Path, rows: list[dict[str, str]], predictions: list[str], generator: str,
                  sampling: Sampling) -> Path:
    """Score ``predictions`` against the rows' labels, write ``<ckpt>/predictions.jsonl`` (one ``{"input", "label",
    "prediction"}`` per line) and ``<ckpt>/evaluation.json``, report the scores to ``$MLRECIPE_METRICS_FILE``;
    returns the predictions file."""
    metric, scores = score(predictions, [row["label"] for row in rows])
    log(f"metric: {metric}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    out = ckpt / "predictions.jsonl"
    lines = [json.dumps({"input": row["input"], "label": row["label"], "prediction": prediction}, ensure_ascii=False)
             + "\n" for row, prediction in zip(rows, predictions, strict=True)]
    with atomic_file(out) as tmp_file, open(tmp_file, "w", encoding="utf-8") as fh:
        fh.writelines(lines)
    summary = {"checkpoint": str(ckpt), "test_path": str(test_file), "samples": len(rows), "generator": generator,
               "metric": metric, "scores": scores, "sampling": asdict(sampling)}
    with atomic_file(ckpt / "evaluation.json") as tmp_file:
        tmp_file.write_text(json.dumps(summary, indent=2) + "\n")
    try:
        from mlrecipe_scripts.core.progress import report_progress

        report_progress(None, None, **scores)
    except ImportError:
        pass
    return out
