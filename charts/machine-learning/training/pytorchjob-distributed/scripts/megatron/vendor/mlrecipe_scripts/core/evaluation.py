"""What every framework's evaluator (``test_checkpoint.py``) shares: reading the JSON-lines test set, the sampling
settings, generating with vLLM or ``transformers``, and the BERTScore / local scores.

Standard library at module level; ``torch``, ``vllm`` and ``evaluate`` are imported by the functions that use them.
``settings`` below is a script's parsed flags: ``batch_size``, ``tensor_parallel_size``, ``max_model_len``,
``dtype``, ``gpu_memory_utilization`` (and ``temperature``, ``top_p``, ``top_k``, ``max_tokens`` for
:meth:`Sampling.from_args`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.answer_metrics import rouge_l_f1, token_f1
from mlrecipe_scripts.core.script_core import ScriptError, log, short_error

GENERATOR_VAR = "MLRECIPE_GENERATOR"


def json_lines(path: Path, limit: int) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of the first ``limit`` non-blank lines of a JSON-lines file; a line that is not
    JSON is a :class:`ScriptError` naming it."""
    taken = 0
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if taken >= limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise ScriptError(f"{path}:{number}: not a JSON line") from None
            taken += 1
            yield number, row


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


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    """``items`` in consecutive lists of ``size`` (at least 1)."""
    size = max(1, size)
    return [items[i:i + size] for i in range(0, len(items), size)]


def vllm_wanted() -> bool:
    """Whether to try vLLM: importable, unless ``MLRECIPE_GENERATOR=transformers``."""
    choice = os.environ.get(GENERATOR_VAR, "").lower()
    if choice == "transformers":
        return False
    available = importlib.util.find_spec("vllm") is not None
    if choice == "vllm" and not available:
        raise ScriptError("MLRECIPE_GENERATOR=vllm but vllm is not installed")
    return available


def generate_with_vllm(model_dir: Path, prompts: list[str], settings: Any, sampling: Sampling) -> list[str]:
    """Generate with ``vllm.LLM`` over ``model_dir`` in chunks of ``--batch_size``."""
    import torch
    from vllm import LLM, SamplingParams

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    tp = max(1, min(settings.tensor_parallel_size, gpus)) if gpus else 1
    if tp != settings.tensor_parallel_size:
        log(f"note: --tensor_parallel_size={settings.tensor_parallel_size} but {gpus} GPU(s) here: using {tp}")
    config = json.loads((model_dir / "config.json").read_text())
    max_len = min(settings.max_model_len, int(config.get("max_position_embeddings") or settings.max_model_len))
    dtype, memory, eager = settings.dtype, settings.gpu_memory_utilization, False
    if not gpus:  # vLLM's CPU backend: the "GPU" memory fraction reserves host memory for the KV cache
        dtype = "auto" if dtype == "bfloat16" else dtype
        memory = min(memory, float(os.environ.get("MLRECIPE_VLLM_CPU_MEMORY_FRACTION", "0.2")))
        eager = os.environ.get("MLRECIPE_VLLM_CPU_COMPILE", "") != "1"
        log(f"note: vLLM on CPU: dtype {dtype}, reserving {memory:.0%} of host memory for the KV cache"
            + (", eager (compiling takes 30 s or more at start; MLRECIPE_VLLM_CPU_COMPILE=1 compiles)" if eager
               else ""))
    llm = LLM(model=str(model_dir), tokenizer=str(model_dir), tensor_parallel_size=tp, enforce_eager=eager,
              gpu_memory_utilization=memory, max_model_len=max_len, dtype=dtype, disable_log_stats=True)
    params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                            max_tokens=sampling.max_tokens)
    out: list[str] = []
    for chunk in chunks(prompts, settings.batch_size):
        out += [result.outputs[0].text for result in llm.generate(chunk, params)]
        log(f"generated {len(out)}/{len(prompts)}")
    return out


def generate_with_transformers(model: Any, tokenizer: Any, prompts: list[str], settings: Any, sampling: Sampling,
                               cuda_dtype: Any | None) -> list[str]:
    """Generate with ``model.generate`` (left padding, new tokens only, special tokens skipped): on CUDA in
    ``cuda_dtype``, or on the CPU in float32 when it is None."""
    import torch

    if cuda_dtype is not None:
        model = model.to(device="cuda", dtype=cuda_dtype)
    else:
        if settings.dtype not in ("float32", "auto"):
            log(f"note: --dtype={settings.dtype} is for GPUs; generating in float32 on CPU")
        model = model.to(dtype=torch.float32)
    device = next(model.parameters()).device
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    limit = int(getattr(model.config, "max_position_embeddings", 0) or settings.max_model_len)
    max_prompt = max(1, min(settings.max_model_len, limit) - sampling.max_tokens)
    extra: dict[str, Any] = {"do_sample": not sampling.greedy}
    if not sampling.greedy:
        extra.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=max(0, sampling.top_k))
    else:
        extra.update(temperature=None, top_p=None, top_k=None)
    out: list[str] = []
    model.eval()
    with torch.inference_mode():
        for chunk in chunks(prompts, settings.batch_size):
            enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True,
                            max_length=max_prompt).to(device)
            generated = model.generate(**enc, max_new_tokens=sampling.max_tokens,
                                       pad_token_id=tokenizer.pad_token_id, **extra)
            new = generated[:, enc["input_ids"].shape[1]:]
            out += tokenizer.batch_decode(new, skip_special_tokens=True)
            log(f"generated {len(out)}/{len(prompts)}")
    return out


def generate(model: Any, tokenizer: Any, prompts: list[str], settings: Any, sampling: Sampling,
             cuda_dtype: Any | None) -> tuple[list[str], str]:
    """(predictions, generator name): vLLM over a saved copy of ``model`` when :func:`vllm_wanted` (falling back to
    ``transformers`` when it fails, unless ``MLRECIPE_GENERATOR=vllm``), else ``model.generate``."""
    predictions: list[str] | None = None
    generator = "transformers"
    if vllm_wanted():
        tmp = Path(tempfile.mkdtemp(prefix="merged-model-"))
        try:
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            predictions = generate_with_vllm(tmp, prompts, settings, sampling)
            generator = "vllm"
        except ScriptError:
            raise
        except Exception as exc:
            if os.environ.get(GENERATOR_VAR, "").lower() == "vllm":
                raise ScriptError(f"vLLM generation failed ({short_error(exc)})") from exc
            log(f"note: vLLM failed ({short_error(exc)}); falling back to transformers generate")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        log("note: vllm is not importable here (or MLRECIPE_GENERATOR=transformers): generating with transformers")
    if predictions is None:
        predictions = generate_with_transformers(model, tokenizer, prompts, settings, sampling, cuda_dtype)
    log(f"generator: {generator}")
    return predictions, generator


def bertscore_f1(predictions: list[str], references: list[str]) -> dict[str, float]:
    """The mean BERTScore F1 (the reference's metric); raises whatever stops ``evaluate`` from computing it
    (offline it needs the metric and its model in the local cache)."""
    import evaluate

    result = evaluate.load("bertscore").compute(predictions=predictions, references=references, lang="en")
    f1 = [float(x) for x in result["f1"]]
    return {"bertscore_f1": sum(f1) / len(f1)}


def local_scores(predictions: list[str], references: list[str]) -> dict[str, float]:
    """The mean token F1 and ROUGE-L F1 of the pairs."""
    n = max(1, len(predictions))
    pairs = list(zip(predictions, references, strict=True))
    return {"token_f1": sum(token_f1(p, r) for p, r in pairs) / n,
            "rouge_l_f1": sum(rouge_l_f1(p, r) for p, r in pairs) / n}
