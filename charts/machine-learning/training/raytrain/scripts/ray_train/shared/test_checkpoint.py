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

import json
import os
import re
import shutil
import string
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_SCRIPTS_DIR = str(Path(__file__).resolve().parent.parent)
if _SCRIPTS_DIR not in sys.path:
    sys.path.insert(0, _SCRIPTS_DIR)

from shared.common import (
    ScriptError,
    atomic_file,
    check_model_source,
    dataclass_parser,
    default_checkpoints_dir,
    home_dir,
    latest_ray_checkpoint,
    log,
    offline_defaults,
    run_main,
    select_precision,
    short_error,
    truthy_str,
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
    ns = vars(build_parser().parse_args(argv))
    raw = ns["full_ft"]
    ns["full_ft"] = truthy_str(raw)
    if isinstance(raw, str) and raw.strip().lower() in ("false", "0", "no", "off"):
        log(f"note: --full_ft={raw} counts as true (any non-empty value does, as in the reference)")
    return EvalArguments(**ns)


# --------------------------------------------------------------------------------------------------------------
# data


def find_test_file(test_path: str | None, home: Path | None = None) -> Path:
    """``--test_path``, else the newest ``test.jsonl`` (by modification time) under ``$HOME/datasets``."""
    if test_path:
        path = Path(test_path).expanduser()
        if not path.is_file():
            raise ScriptError(f"--test_path={test_path}: no such file")
        return path
    root = (home or home_dir()) / "datasets"
    found = list(root.rglob("test.jsonl")) if root.is_dir() else []
    if not found:
        raise ScriptError(f"no test.jsonl under {root}; pass --test_path")
    newest = max(found, key=lambda p: (p.stat().st_mtime, str(p)))
    log(f"test set: {newest} (the newest test.jsonl under {root})")
    return newest


def read_test_rows(path: Path, max_samples: int) -> list[dict[str, str]]:
    """The first ``max_samples`` rows of a jsonl test set as ``{"input", "label"}``."""
    rows = []
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
    def from_args(cls, args: EvalArguments) -> Sampling:
        """temperature <= 0: greedy and top_p 1; top_k <= 0: -1."""
        greedy = args.temperature <= 0
        return cls(greedy=greedy, temperature=0.0 if greedy else args.temperature,
                   top_p=1.0 if greedy else args.top_p, top_k=-1 if args.top_k <= 0 else args.top_k,
                   max_tokens=args.max_tokens)


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    size = max(1, size)
    return [items[i:i + size] for i in range(0, len(items), size)]


def generate_with_vllm(model_dir: Path, prompts: list[str], args: EvalArguments, sampling: Sampling) -> list[str]:
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


def generate_with_transformers(model: Any, tokenizer: Any, prompts: list[str], args: EvalArguments,
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


# --------------------------------------------------------------------------------------------------------------
# scoring


_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def normalize_tokens(text: str) -> list[str]:
    """Lower-cased, punctuation removed, split on whitespace."""
    return _PUNCT.sub(" ", text.lower()).split()


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD-style token-overlap F1 (1.0 when both are empty)."""
    pred, ref = normalize_tokens(prediction), normalize_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    counts: dict[str, int] = {}
    for token in ref:
        counts[token] = counts.get(token, 0) + 1
    common = 0
    for token in pred:
        if counts.get(token, 0) > 0:
            common += 1
            counts[token] -= 1
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1 on normalized tokens (longest common subsequence)."""
    pred, ref = normalize_tokens(prediction), normalize_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    previous = [0] * (len(ref) + 1)
    for p in pred:
        current = [0]
        for j, r in enumerate(ref, 1):
            current.append(previous[j - 1] + 1 if p == r else max(previous[j], current[j - 1]))
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(pred), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)


def score(predictions: list[str], references: list[str]) -> tuple[str, dict[str, float]]:
    """(metric description, mean scores): BERTScore F1 when it loads, else local token F1 and ROUGE-L."""
    if os.environ.get("MLRECIPE_METRIC", "").lower() != "local":
        try:
            import evaluate

            bertscore = evaluate.load("bertscore")
            result = bertscore.compute(predictions=predictions, references=references, lang="en")
            f1 = [float(x) for x in result["f1"]]
            return "bertscore", {"bertscore_f1": sum(f1) / len(f1)}
        except Exception as exc:  # noqa: BLE001 - any failure to load or run it means: use the local metric
            log(f"note: BERTScore (the reference's metric) is not available here ({short_error(exc)}); "
                "using local metrics")
    else:
        log("note: MLRECIPE_METRIC=local: BERTScore skipped")
    n = max(1, len(predictions))
    return "local (token F1, ROUGE-L F1)", {
        "token_f1": sum(token_f1(p, r) for p, r in zip(predictions, references, strict=True)) / n,
        "rouge_l_f1": sum(rouge_l_f1(p, r) for p, r in zip(predictions, references, strict=True)) / n,
    }


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

    from shared.convert_checkpoint_to_hf import checkpoint_kind, checkpoint_tokenizer, load_trained_model

    kind = checkpoint_kind(ckpt, args.full_ft)
    model_path = check_model_source(args.model_path or args.base_model, flag) if kind == "lora" else \
        (args.model_path or args.base_model)
    log(f"checkpoint {ckpt} ({kind}); {len(rows)} test rows from {test_file}")
    model = load_trained_model(ckpt, model_path, flag, args.full_ft).merged()
    tokenizer = checkpoint_tokenizer(ckpt, model_path, flag)
    prompts = [row["input"] for row in rows]
    sampling = Sampling.from_args(args)

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
        from shared.callbacks import report_progress

        report_progress(**scores)
    except ImportError:
        pass
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
