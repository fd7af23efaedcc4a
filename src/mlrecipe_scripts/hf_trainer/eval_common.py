"""What the accelerate and the ray_train evaluators (``shared/test_checkpoint.py``) share: reading the test set,
the reference's sampling rules, generation (vLLM when importable, else ``transformers`` ``generate``), scoring and
the result files.

One file for both trees: the accelerate tree has it here; the ray_train tree links ``shared/eval_common.py`` to it.
``args`` below is the evaluator's parsed flags (``batch_size``, ``temperature``, ``top_k``, ``top_p``,
``max_tokens``, ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``, ``dtype``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.answer_metrics import rouge_l_f1, token_f1
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
    rows: list[dict[str, str]] = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if len(rows) >= max_samples:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise ScriptError(f"{path}:{number}: not a JSON line") from None
            rows.append({"input": str(row.get("input") or ""), "label": str(row.get("output") or "")})
    if not rows:
        raise ScriptError(f"{path}: the test set is empty")
    return rows


# --------------------------------------------------------------------------------------------------------------
# generation


@dataclass
class Sampling:
    """Sampling settings after the reference's rules."""

    greedy: bool
    temperature: float
    top_p: float
    top_k: int  # -1: off
    max_tokens: int

    @classmethod
    def from_args(cls, args: Any) -> Sampling:
        """temperature <= 0: greedy and top_p 1; top_k <= 0: -1."""
        greedy = args.temperature <= 0
        return cls(greedy=greedy, temperature=0.0 if greedy else args.temperature,
                   top_p=1.0 if greedy else args.top_p, top_k=-1 if args.top_k <= 0 else args.top_k,
                   max_tokens=args.max_tokens)


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    size = max(1, size)
    return [items[i:i + size] for i in range(0, len(items), size)]


def generate_with_vllm(model_dir: Path, prompts: list[str], args: Any, sampling: Sampling) -> list[str]:
    """Generate with ``vllm.LLM`` over ``model_dir`` in chunks of ``--batch_size``."""
    import torch
    from vllm import LLM, SamplingParams

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    tp = max(1, min(args.tensor_parallel_size, gpus)) if gpus else 1
    if tp != args.tensor_parallel_size:
        log(f"note: --tensor_parallel_size={args.tensor_parallel_size} but {gpus} GPU(s) here: using {tp}")
    config = json.loads((model_dir / "config.json").read_text())
    max_len = min(args.max_model_len, int(config.get("max_position_embeddings") or args.max_model_len))
    dtype, memory = args.dtype, args.gpu_memory_utilization
    if not gpus:  # vLLM's CPU backend: the "GPU" memory fraction reserves host memory for the KV cache
        dtype = "auto" if dtype == "bfloat16" else dtype
        memory = min(memory, float(os.environ.get("MLRECIPE_VLLM_CPU_MEMORY_FRACTION", "0.2")))
        log(f"note: vLLM on CPU: dtype {dtype}, reserving {memory:.0%} of host memory for the KV cache")
    llm = LLM(model=str(model_dir), tokenizer=str(model_dir), tensor_parallel_size=tp,
              gpu_memory_utilization=memory, max_model_len=max_len, dtype=dtype, disable_log_stats=True)
    params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                            max_tokens=sampling.max_tokens)
    out: list[str] = []
    for chunk in _chunks(prompts, args.batch_size):
        out += [result.outputs[0].text for result in llm.generate(chunk, params)]
        log(f"generated {len(out)}/{len(prompts)}")
    return out


def generate_with_transformers(model: Any, tokenizer: Any, prompts: list[str], args: Any,
                               sampling: Sampling) -> list[str]:
    """Generate with ``model.generate`` (left padding, new tokens only, special tokens skipped)."""
    import torch

    precision = select_precision()
    if precision.device == "cuda":
        dtype = torch.bfloat16 if args.dtype in ("bfloat16", "bf16") and precision.bf16 else \
            torch.float16 if args.dtype in ("float16", "half", "fp16") else precision.dtype
        model = model.to(device="cuda", dtype=dtype)
    else:
        if args.dtype not in ("float32", "auto"):
            log(f"note: --dtype={args.dtype} is for GPUs; generating in float32 on CPU")
        model = model.to(dtype=torch.float32)
    device = next(model.parameters()).device
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    limit = int(getattr(model.config, "max_position_embeddings", 0) or args.max_model_len)
    max_prompt = max(1, min(args.max_model_len, limit) - sampling.max_tokens)
    extra: dict[str, Any] = {"do_sample": not sampling.greedy}
    if not sampling.greedy:
        extra.update(temperature=sampling.temperature, top_p=sampling.top_p,
                     top_k=max(0, sampling.top_k))
    else:
        extra.update(temperature=None, top_p=None, top_k=None)
    out: list[str] = []
    model.eval()
    with torch.inference_mode():
        for chunk in _chunks(prompts, args.batch_size):
            enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True,
                            max_length=max_prompt).to(device)
            generated = model.generate(**enc, max_new_tokens=sampling.max_tokens,
                                       pad_token_id=tokenizer.pad_token_id, **extra)
            new = generated[:, enc["input_ids"].shape[1]:]
            out += tokenizer.batch_decode(new, skip_special_tokens=True)
            log(f"generated {len(out)}/{len(prompts)}")
    return out


def vllm_wanted() -> bool:
    """Whether to try vLLM: importable, unless ``MLRECIPE_GENERATOR=transformers``."""
    import importlib.util

    choice = os.environ.get("MLRECIPE_GENERATOR", "").lower()
    if choice == "transformers":
        return False
    available = importlib.util.find_spec("vllm") is not None
    if choice == "vllm" and not available:
        raise ScriptError("MLRECIPE_GENERATOR=vllm but vllm is not installed")
    return available


def generate(model: Any, tokenizer: Any, prompts: list[str], args: Any, sampling: Sampling) -> tuple[list[str], str]:
    """(predictions, generator name): vLLM over a saved copy of ``model`` when :func:`vllm_wanted` (falling back to
    ``transformers`` when it fails, unless ``MLRECIPE_GENERATOR=vllm``), else ``model.generate``."""
    predictions: list[str] | None = None
    generator = "transformers"
    if vllm_wanted():
        tmp = Path(tempfile.mkdtemp(prefix="merged-model-"))
        try:
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            predictions = generate_with_vllm(tmp, prompts, args, sampling)
            generator = "vllm"
        except ScriptError:
            raise
        except Exception as exc:
            if os.environ.get("MLRECIPE_GENERATOR", "").lower() == "vllm":
                raise ScriptError(f"vLLM generation failed ({short_error(exc)})") from exc
            log(f"note: vLLM failed ({short_error(exc)}); falling back to transformers generate")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        log("note: vllm is not importable here (or MLRECIPE_GENERATOR=transformers): generating with transformers")
    if predictions is None:
        predictions = generate_with_transformers(model, tokenizer, prompts, args, sampling)
    log(f"generator: {generator}")
    return predictions, generator


# --------------------------------------------------------------------------------------------------------------
# scoring and results


def score(predictions: list[str], references: list[str]) -> tuple[str, dict[str, float]]:
    """(metric description, mean scores): BERTScore F1 when it loads (offline it needs the metric and its model in
    the local cache), else local token F1 and ROUGE-L F1; ``MLRECIPE_METRIC=local`` skips BERTScore."""
    if os.environ.get("MLRECIPE_METRIC", "").lower() != "local":
        try:
            import evaluate

            bertscore = evaluate.load("bertscore")
            result = bertscore.compute(predictions=predictions, references=references, lang="en")
            f1 = [float(x) for x in result["f1"]]
            return "bertscore", {"bertscore_f1": sum(f1) / len(f1)}
        except Exception as exc:
            log(f"note: BERTScore (the reference's metric) is not available here ({short_error(exc)}); "
                "using local metrics")
    else:
        log("note: MLRECIPE_METRIC=local: BERTScore skipped")
    n = max(1, len(predictions))
    return "local (token F1, ROUGE-L F1)", {
        "token_f1": sum(token_f1(p, r) for p, r in zip(predictions, references, strict=True)) / n,
        "rouge_l_f1": sum(rouge_l_f1(p, r) for p, r in zip(predictions, references, strict=True)) / n,
    }


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
        from mlrecipe_scripts.hf_trainer.trainer_callbacks import report_progress

        report_progress(None, None, **scores)
    except ImportError:
        pass
    return out
