"""Generate answers for ``test.jsonl`` with the newest NeMo 2 fine-tuning checkpoint (Megatron inference), then score.

Launch it as the reference recipe does, ``torchrun --nproc_per_node=G --nnodes=N ... test_checkpoint.py
--gpus_per_node=G --num_nodes=N`` (a plain ``python test_checkpoint.py`` also works: Lightning then starts the G local
processes). The checkpoint is found as by ``convert_checkpoint_to_hf.py`` (``--nemo_logs_dir``; a LoRA checkpoint is
applied on the base checkpoint its ``adapter_metadata.json`` names). Prompts are the ``input`` of the first
``--max_samples`` rows of ``--test_path`` (default: the newest ``test.jsonl`` under ``$HOME/datasets``), the count
rounded **up** to a multiple of ``--max_batch_size`` as in the reference.

* Generation: NeMo's ``llm.generate`` (Megatron-Core inference engine, TP / PP / CP from the flags, bf16, data
  parallel over the remaining GPUs). Sampling: ``--temperature`` <= 0 means greedy (top-k 1); ``--top_k`` > 0 turns
  top-p off (Megatron takes one or the other). ``--inference_max_seq_length`` x ``--max_batch_size`` is the
  pipelining threshold; ``--block_size_tokens``, ``--buffer_size_gb`` and ``--max_tokens`` size the reference's
  dynamic-batching KV cache and are accepted for compatibility only (``llm.generate`` sizes its cache from the
  longest prompt plus ``--num_tokens_to_generate``).
* Scoring: BERTScore F1 (``evaluate`` + ``bert-score``, as in the reference) when it can run; otherwise, and with
  ``MLRECIPE_METRIC=local``, token-overlap F1 and ROUGE-L F1 computed here.

Writes (global rank 0) ``<checkpoint>.jsonl`` (each test row with ``output`` renamed ``label``, plus ``prediction``)
and ``<checkpoint>.evaluation.json``. Flags: family T-nemo (typed ``--<field>``).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.evaluation import json_lines
from mlrecipe_scripts.nemo2.nemo2_common import (
    ScriptError,
    add_flags,
    atomic_file,
    check_checkpoint,
    data_parallel_size,
    find_checkpoint,
    int_env,
    log,
    offline_defaults,
    quiet_unless_rank_zero,
    report_progress,
    require_cuda,
    require_nemo,
    run_main,
    score,
    sibling,
)


@dataclass
class Config:
    """Flags (family T-nemo: typed ``--<field>``), in the reference's order."""

    nemo_logs_dir: str | None = None
    test_path: str | None = None
    max_samples: int = 1024
    gpus_per_node: int = 8
    num_nodes: int = 1
    tensor_parallel_size: int = 8
    pipeline_parallel_size: int = 1
    context_parallel_size: int = 1
    temperature: float = 0.1
    top_k: int = 0
    top_p: float = 0.95
    num_tokens_to_generate: int = 512
    random_seed: int = 42
    max_batch_size: int = 16
    block_size_tokens: int = 256
    buffer_size_gb: float = 20.0
    max_tokens: int = 65536
    inference_max_seq_length: int = 8192


PARALLELISM = ("gpus_per_node", "num_nodes", "tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size")
DYNAMIC_ENGINE_ONLY = ("block_size_tokens", "buffer_size_gb", "max_tokens")
POSITIVE = ("max_samples", "gpus_per_node", "num_nodes", "tensor_parallel_size", "pipeline_parallel_size",
            "context_parallel_size", "num_tokens_to_generate", "max_batch_size", "block_size_tokens", "max_tokens",
            "inference_max_seq_length")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (family T-nemo)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flags(parser, Config, bool_flips=False)
    return parser


def parse_args(argv: list[str] | None = None) -> Config:
    """Parse the command line (strict: an unknown flag exits with status 2) and check the values (status 2)."""
    parser = build_parser()
    config = Config(**vars(parser.parse_args(argv)))
    for name in POSITIVE:
        if getattr(config, name) < 1:
            parser.error(f"--{name}={getattr(config, name)}: must be at least 1")
    if not 0 <= config.top_p <= 1:
        parser.error(f"--top_p={config.top_p}: must be between 0 and 1")
    if config.num_tokens_to_generate >= config.inference_max_seq_length:
        parser.error(f"--num_tokens_to_generate={config.num_tokens_to_generate}: must be smaller than "
                     f"--inference_max_seq_length={config.inference_max_seq_length} (room for the prompt)")
    try:
        data_parallel_size(config.num_nodes, config.gpus_per_node, config.tensor_parallel_size,
                           config.pipeline_parallel_size, config.context_parallel_size)
    except ValueError as exc:
        parser.error(str(exc))
    return config


# --------------------------------------------------------------------------------------------------------------
# pure parts


def samples_to_load(max_samples: int, max_batch_size: int) -> int:
    """``max_samples`` rounded up to a multiple of ``max_batch_size`` (the reference's rule)."""
    return -(-max_samples // max_batch_size) * max_batch_size


def sampling_settings(config: Config) -> dict[str, Any]:
    """Megatron sampling parameters: greedy (top-k 1) when temperature <= 0; top-k > 0 switches top-p off."""
    if config.temperature <= 0:
        return {"temperature": 1.0, "top_k": 1, "top_p": 0.0, "num_tokens_to_generate": config.num_tokens_to_generate}
    top_k = max(0, config.top_k)
    return {"temperature": config.temperature, "top_k": top_k, "top_p": 0.0 if top_k > 0 else config.top_p,
            "num_tokens_to_generate": config.num_tokens_to_generate}


def find_test_file(test_path: str | None, home: Path | None = None) -> Path:
    """``--test_path``, else the newest (by modification time) ``test.jsonl`` under ``$HOME/datasets``."""
    if test_path:
        path = Path(test_path).expanduser()
        if not path.is_file():
            raise ScriptError(f"--test_path={test_path}: no such file")
        return path
    root = (home or Path.home()) / "datasets"
    found = [p for p in root.rglob("test.jsonl") if p.is_file()] if root.is_dir() else []
    if not found:
        raise ScriptError(f"no test.jsonl under {root}; pass --test_path")
    newest = max(found, key=lambda p: (p.stat().st_mtime, str(p)))
    log(f"found test file {newest}")
    return newest


def read_test_rows(path: Path, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows (all fields kept, ``output`` renamed ``label``); each needs a string ``input``."""
    rows: list[dict[str, Any]] = []
    for number, row in json_lines(path, limit):
        if not isinstance(row, dict) or not isinstance(row.get("input"), str):
            raise ScriptError(f"{path}:{number}: no string 'input' field")
        row["label"] = row.pop("output", None)
        rows.append(row)
    if not rows:
        raise ScriptError(f"{path}: the test set is empty")
    return rows


def check_launch(config: Config, environ: Any = None) -> int:
    """The global rank of this process (0 when not started by torchrun); under torchrun its world size must be
    ``--gpus_per_node x --num_nodes``."""
    environ = os.environ if environ is None else environ
    if "WORLD_SIZE" in environ and "RANK" in environ and "LOCAL_RANK" in environ:
        world = int_env("WORLD_SIZE", 1, environ)
        expected = config.gpus_per_node * config.num_nodes
        if world != expected:
            raise ScriptError(f"torchrun started {world} process(es) but --gpus_per_node={config.gpus_per_node} x "
                              f"--num_nodes={config.num_nodes} = {expected}")
        return int_env("RANK", 0, environ)
    return 0


# --------------------------------------------------------------------------------------------------------------
# NeMo parts


def inference_params(settings: dict[str, Any]) -> Any:
    """Megatron-Core's sampling parameters object (``SamplingParams``, or ``CommonInferenceParams`` in older ones)."""
    try:
        from megatron.core.inference.sampling_params import SamplingParams as Params
    except ImportError:
        from megatron.core.inference.common_inference_params import CommonInferenceParams as Params
    return Params(return_log_probs=False, **settings)


def generate(ckpt: Path, prompts: list[str], config: Config) -> tuple[list[str], int]:
    """(predictions in prompt order, global rank) with ``llm.generate`` on a Megatron trainer."""
    import torch
    from nemo import lightning as nl
    from nemo.collections.llm import api

    strategy = nl.MegatronStrategy(
        tensor_model_parallel_size=config.tensor_parallel_size,
        pipeline_model_parallel_size=config.pipeline_parallel_size,
        context_parallel_size=config.context_parallel_size,
        sequence_parallel=False, setup_optimizers=False)
    trainer = nl.Trainer(
        accelerator="gpu", devices=config.gpus_per_node, num_nodes=config.num_nodes, strategy=strategy,
        plugins=nl.MegatronMixedPrecision(precision="bf16-mixed", params_dtype=torch.bfloat16,
                                          pipeline_dtype=torch.bfloat16, autocast_enabled=False,
                                          grad_reduce_in_fp32=False))
    results = api.generate(
        path=ckpt, trainer=trainer, prompts=prompts, params_dtype=torch.bfloat16, add_BOS=False,
        max_batch_size=config.max_batch_size, random_seed=config.random_seed,
        inference_batch_times_seqlen_threshold=config.inference_max_seq_length * config.max_batch_size,
        inference_params=inference_params(sampling_settings(config)), text_only=True, enable_flash_decode=False)
    predictions = [r if isinstance(r, str) else str(getattr(r, "generated_text", r)) for r in results]
    if len(predictions) != len(prompts):
        raise ScriptError(f"llm.generate returned {len(predictions)} answers for {len(prompts)} prompts")
    return predictions, int(trainer.global_rank)


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Generate, write the predictions, score; returns the exit status."""
    config = parse_args(argv)
    offline_defaults()
    quiet_unless_rank_zero(check_launch(config))
    ckpt = find_checkpoint(config.nemo_logs_dir)
    check_checkpoint(ckpt)
    test_file = find_test_file(config.test_path)
    limit = samples_to_load(config.max_samples, config.max_batch_size)
    rows = read_test_rows(test_file, limit)
    log(f"checkpoint {ckpt}; {len(rows)} test rows from {test_file} (--max_samples={config.max_samples} rounded up "
        f"to {limit}, a multiple of --max_batch_size={config.max_batch_size})")
    changed = [f"--{n}" for n in DYNAMIC_ENGINE_ONLY if getattr(config, n) != getattr(Config, n)]
    if changed:
        log(f"note: {', '.join(changed)} size the reference's dynamic-batching engine and are not used here")
    require_nemo("test_checkpoint.py", "nemo.collections.llm", "megatron.core")
    require_cuda("test_checkpoint.py", config.gpus_per_node)
    predictions, rank = generate(ckpt, [row["input"] for row in rows], config)
    if rank != 0:
        return 0

    out = sibling(ckpt, ".jsonl")
    with atomic_file(out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({**row, "prediction": prediction}, ensure_ascii=False) + "\n"
                      for row, prediction in zip(rows, predictions, strict=True))
    log(f"wrote {out}")
    for i, (row, prediction) in enumerate(zip(rows[:3], predictions, strict=False), 1):
        log(f"--- sample {i}\ninput: {row['input'][:200]!r}\nlabel: {str(row['label'])[:200]!r}\n"
            f"prediction: {prediction[:200]!r}")
    metric, scores = score(predictions, [str(row["label"] or "") for row in rows])
    log(f"metric: {metric}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    summary = {"checkpoint": str(ckpt), "test_path": str(test_file), "samples": len(rows), "generator": "llm.generate",
               "metric": metric, "scores": scores, "sampling": sampling_settings(config),
               "parallelism": {k: v for k, v in asdict(config).items() if k in PARALLELISM},
               "predictions": str(out)}
    with atomic_file(sibling(ckpt, ".evaluation.json")) as tmp:
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
    report_progress(None, None, **scores)
    return 0


if __name__ == "__main__":
    run_main(main)
