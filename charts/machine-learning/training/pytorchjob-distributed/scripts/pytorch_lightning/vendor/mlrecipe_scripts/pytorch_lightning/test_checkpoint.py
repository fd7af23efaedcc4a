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
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
    short_error,
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
            if not isinstance(row, dict) or "input" not in row:
                raise ScriptError(f"{path}:{number}: no 'input' field")
            rows.append({"input": str(row.get("input") or ""), "label": str(row.get("output") or "")})
    if not rows:
        raise ScriptError(f"{path}: the test set is empty")
    return rows


# --------------------------------------------------------------------------------------------------------------
# generation


@dataclass
class Sampling:
    """The sampling settings after the reference's rules."""

    greedy: bool
    temperature: float
    top_p: float
    top_k: int  # -1: off
    max_tokens: int

    @classmethod
    def from_config(cls, config: EvalConfig) -> Sampling:
        greedy = config.temperature <= 0
        return cls(greedy, 0.0 if greedy else config.temperature, 1.0 if greedy else config.top_p,
                   config.top_k if config.top_k > 0 else -1, config.max_tokens)


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), max(1, size))]


def generator_choice() -> str:
    """``vllm`` when importable (or forced), else ``transformers``."""
    import importlib.util

    forced = os.environ.get("MLRECIPE_GENERATOR", "").lower()
    available = importlib.util.find_spec("vllm") is not None
    if forced == "vllm" and not available:
        raise ScriptError("MLRECIPE_GENERATOR=vllm but vllm is not installed")
    if forced == "transformers" or not available:
        return "transformers"
    return "vllm"


def generate_with_vllm(model_dir: Path, prompts: list[str], config: EvalConfig, sampling: Sampling) -> list[str]:
    """``vllm.LLM`` over ``model_dir``, prompts in chunks of ``--batch_size``."""
    import torch
    from vllm import LLM, SamplingParams

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    tp = max(1, min(config.tensor_parallel_size, gpus)) if gpus else 1
    if tp != config.tensor_parallel_size:
        log(f"note: --tensor_parallel_size={config.tensor_parallel_size} but {gpus} GPU(s) here: using {tp}")
    model_config = json.loads((model_dir / "config.json").read_text())
    max_len = min(config.max_model_len, int(model_config.get("max_position_embeddings") or config.max_model_len))
    dtype, memory = config.dtype, config.gpu_memory_utilization
    if not gpus:  # vLLM's CPU build: the memory fraction is of host memory (KV cache)
        dtype = "auto" if dtype == "bfloat16" else dtype
        memory = min(memory, float(os.environ.get("MLRECIPE_VLLM_CPU_MEMORY_FRACTION", "0.2")))
    llm = LLM(model=str(model_dir), tokenizer=str(model_dir), tensor_parallel_size=tp, gpu_memory_utilization=memory,
              max_model_len=max_len, dtype=dtype, disable_log_stats=True)
    params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                            max_tokens=sampling.max_tokens)
    out: list[str] = []
    for chunk in _chunks(prompts, config.batch_size):
        out += [result.outputs[0].text for result in llm.generate(chunk, params)]
        log(f"generated {len(out)}/{len(prompts)}")
    return out


def generate_with_transformers(model: Any, tokenizer: Any, prompts: list[str], config: EvalConfig,
                               sampling: Sampling) -> list[str]:
    """``model.generate`` (left padding, new tokens only, special tokens skipped); bf16 on CUDA, fp32 on CPU."""
    import torch

    if torch.cuda.is_available():
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "half": torch.float16,
                 "float32": torch.float32}.get(config.dtype, torch.bfloat16)
        model = model.to(device="cuda", dtype=dtype)
    else:
        if config.dtype not in ("float32", "auto"):
            log(f"note: --dtype={config.dtype} is for GPUs; generating in float32 on CPU")
        model = model.to(dtype=torch.float32)
    device = next(model.parameters()).device
    tokenizer.padding_side = tokenizer.truncation_side = "left"
    limit = int(getattr(model.config, "max_position_embeddings", 0) or config.max_model_len)
    max_prompt = max(1, min(config.max_model_len, limit) - sampling.max_tokens)
    options: dict[str, Any] = {"do_sample": not sampling.greedy}
    if sampling.greedy:
        options.update(temperature=None, top_p=None, top_k=None)
    else:
        options.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=max(0, sampling.top_k))
    out: list[str] = []
    with torch.inference_mode():
        for chunk in _chunks(prompts, config.batch_size):
            enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True, max_length=max_prompt).to(device)
            generated = model.generate(**enc, max_new_tokens=sampling.max_tokens, pad_token_id=tokenizer.pad_token_id,
                                       **options)
            out += tokenizer.batch_decode(generated[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            log(f"generated {len(out)}/{len(prompts)}")
    return out


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
    sampling = Sampling.from_config(config)

    generator = generator_choice()
    predictions: list[str] | None = None
    if generator == "vllm":
        tmp = Path(tempfile.mkdtemp(prefix="vllm_model_"))
        try:
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            predictions = generate_with_vllm(tmp, prompts, config, sampling)
        except Exception as exc:
            if os.environ.get("MLRECIPE_GENERATOR", "").lower() == "vllm":
                raise ScriptError(f"vLLM generation failed ({short_error(exc)})") from exc
            log(f"note: vLLM failed ({short_error(exc)}); generating with transformers instead")
            generator = "transformers"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if predictions is None:
        predictions = generate_with_transformers(model, tokenizer, prompts, config, sampling)
    log(f"generator: {generator}")

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
