"""Supervised fine-tuning of a vision-language model (LoRA by default, ``--full_ft`` for all parameters) with the
Hugging Face Trainer inside Ray Train ``TorchTrainer``.

Run it as the Ray job driver: ``cd $SCRIPTS_DIR && python multimodal/vision_language/ray_train_vlm.py ...``. The flags
are those of ``scripts/accelerate``'s ``peft_accelerate.py`` (family H: ``--freeze_vision_encoder`` on by default,
``--lora_on_vision``, the ``--hf_*`` dataset flags ...), with ``--results_dir`` ("results", joined to ``$HOME``)
instead of ``--output_dir``, plus ``--save_steps`` (100; used when there is no validation row) and
``--save_total_limit`` (2), and the mlrecipe additions ``--ray_num_workers`` / ``--ray_cpus_per_worker``.

Ray as in ``text/ray_train_sft.py`` (``shared/ray_launch.py``): ``RAY_ADDRESS`` joins a cluster, else a local Ray is
started and stopped; one GPU worker per GPU (``nccl``, bf16, FSDP) or, without GPUs, 2 CPU workers (``gloo``, fp32,
DDP). Data: ``--data_dir`` with ``training.jsonl`` / ``validation.jsonl`` (see ``dataset_module.py``), prepared first
from ``--hf_dataset_name`` when given (default ``$HOME/datasets/<name>/<config>/train=90%-val=5%-test=5%``, else
``$HOME/datasets/visual_instruct``). Labels cover the assistant turns.

Writes Ray checkpoints ``<results_dir>/<model_id with / -> ->-vlm-sft/checkpoint_<step>/checkpoint/`` (the adapter,
or the model with ``--full_ft``, plus the processor) at each evaluation that improves ``eval_loss`` (Ray keeps the
newest 2; every ``--save_steps`` without validation rows), the HF scratch ``<results_dir>/checkpoint-<step>/``,
``train_results.json`` and ``logs/``. ``shared/convert_checkpoint_to_hf.py`` and ``shared/test_checkpoint.py`` find
the newest one with ``--checkpoints_dir=$HOME/results/<model_id with / -> ->-vlm-sft``.
"""

from __future__ import annotations

import argparse
from typing import Any

from mlrecipe_scripts.hf_trainer.vision_language.training_common import SFT, apply_lora, build_vlm_parser, parse_checked
from mlrecipe_scripts.ray_train.common import run_main
from mlrecipe_scripts.ray_train.vision_language.ray_vlm_common import RayVLMSpec, add_ray_flags, run_driver, run_worker


def build_parser() -> argparse.ArgumentParser:
    """The flags of this script."""
    flags = build_vlm_parser(__doc__.split("\n")[0], SFT, output_dir=False)
    flags.training.add_argument("--save_steps", type=int, default=100)
    flags.training.add_argument("--save_total_limit", type=int, default=2)
    add_ray_flags(flags.parser, flags.paths)
    return flags.parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and sanity-check the command line (strict: an unknown flag exits with status 2)."""
    return parse_checked(build_parser(), argv)


def configure(model: Any, adapter: Any, args: argparse.Namespace, flag: str) -> Any:
    """LoRA on the adapter's target modules, unless ``--full_ft``."""
    return model if args.full_ft else apply_lora(model, adapter, args, flag)


def schedule(args: argparse.Namespace, evaluate: bool) -> tuple[dict[str, Any], list[Any]]:
    """Step based; with validation rows a checkpoint at each improving evaluation and early stopping."""
    from transformers import EarlyStoppingCallback

    from mlrecipe_scripts.ray_train.ray_callbacks import SaveOnBestMetricCallback

    plan = {"max_steps": args.max_steps, "save_strategy": "no" if evaluate else "steps",
            "save_steps": args.save_steps, "save_total_limit": args.save_total_limit,
            "metric_for_best_model": "eval_loss" if evaluate else None, "greater_is_better": False}
    if not evaluate:
        return plan, []
    return plan, [SaveOnBestMetricCallback(), EarlyStoppingCallback(
        early_stopping_patience=args.early_stopping_patience, early_stopping_threshold=args.early_stopping_threshold)]


SPEC = RayVLMSpec(SFT, "VLM SFT", "-vlm-sft",
                  "mlrecipe_scripts.ray_train.vision_language.ray_train_vlm", "VLMDataset", configure, schedule)


def train_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker (called by ``shared/ray_launch.py``)."""
    run_worker(config, SPEC)


def main(argv: list[str] | None = None) -> int:
    """Validate the flags, then run the workers on Ray; returns the exit status."""
    return run_driver(parse_args(argv), SPEC)


if __name__ == "__main__":
    run_main(main)
