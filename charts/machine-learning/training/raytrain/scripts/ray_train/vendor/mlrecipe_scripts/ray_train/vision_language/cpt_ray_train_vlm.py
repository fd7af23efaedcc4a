"""Continual pre-training of a vision-language model (all parameters, every token a target, epoch based) with the
Hugging Face Trainer inside Ray Train ``TorchTrainer``.

Run it as the Ray job driver: ``cd $SCRIPTS_DIR && python multimodal/vision_language/cpt_ray_train_vlm.py ...``. The
flags are those of ``scripts/accelerate``'s ``multimodal/vision_language/cpt_accelerate.py`` (the vision tower is
trained unless ``--freeze_vision_encoder``; ``--hf_train_split_ratio`` 0.99, a two-decimal default data dir, else
``$HOME/datasets/visual_cpt``), with ``--results_dir`` ("results", joined to ``$HOME``) instead of ``--output_dir``
and the mlrecipe additions ``--ray_num_workers`` / ``--ray_cpus_per_worker``. Ray, devices and data as in
``ray_train_vlm.py``. Cosine schedule; evaluation every ``--eval_steps``, a checkpoint every ``--save_steps``;
``--resume_from_checkpoint`` takes an HF checkpoint directory (e.g. a Ray checkpoint's ``checkpoint/``).

Writes Ray checkpoints ``<results_dir>/<model_id with / -> ->-vlm-cpt/checkpoint_<step>/checkpoint/`` (model plus
processor; Ray keeps the newest 2), the HF scratch ``<results_dir>/checkpoint-<step>/`` (rotating,
``--save_total_limit``), ``train_results.json`` and ``logs/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer.vision_language.training_common import CPT, build_vlm_parser, parse_checked
from mlrecipe_scripts.ray_train.common import ScriptError, run_main
from mlrecipe_scripts.ray_train.vision_language.ray_vlm_common import RayVLMSpec, add_ray_flags, run_driver, run_worker


def build_parser() -> argparse.ArgumentParser:
    """The flags of this script."""
    flags = build_vlm_parser(__doc__.split("\n")[0], CPT, output_dir=False)
    add_ray_flags(flags.parser, flags.paths)
    return flags.parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and sanity-check the command line (strict: an unknown flag exits with status 2)."""
    return parse_checked(build_parser(), argv)


def configure(model: Any, adapter: Any, args: argparse.Namespace, flag: str) -> Any:
    """All parameters train (no LoRA)."""
    return model


def schedule(args: argparse.Namespace, evaluate: bool) -> tuple[dict[str, Any], list[Any]]:
    """Epoch based, a checkpoint every ``--save_steps``."""
    return {"num_train_epochs": args.num_train_epochs, "save_strategy": "steps", "save_steps": args.save_steps,
            "save_total_limit": args.save_total_limit}, []


SPEC = RayVLMSpec(CPT, "VLM CPT", "-vlm-cpt",
                  "mlrecipe_scripts.ray_train.vision_language.cpt_ray_train_vlm", "VLMCPTDataset", configure, schedule)


def train_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker (called by ``shared/ray_launch.py``)."""
    run_worker(config, SPEC)


def main(argv: list[str] | None = None) -> int:
    """Validate the flags, then run the workers on Ray; returns the exit status."""
    args = parse_args(argv)
    if args.resume_from_checkpoint and not Path(args.resume_from_checkpoint).expanduser().is_dir():
        raise ScriptError(f"--resume_from_checkpoint={args.resume_from_checkpoint}: no such directory")
    return run_driver(args, SPEC)


if __name__ == "__main__":
    run_main(main)
