"""Continual pre-training of a vision-language model: all parameters (no LoRA), every token is a target, epoch
based, under ``accelerate launch``.

Same adapters, data format and ``--hf_*`` preparation as ``peft_accelerate.py`` (family H flags), with CPT
defaults: the vision tower is trained unless ``--freeze_vision_encoder``; ``--hf_train_split_ratio`` 0.99 and a
two-decimal default data dir (``train=99.00%-val=0.50%-test=0.50%``; without a dataset
``$HOME/datasets/visual_cpt``). The learning rate follows a cosine schedule; evaluation every ``--eval_steps`` and
checkpoints every ``--save_steps`` (rotating, ``--save_total_limit``; each holds the processor);
``--resume_from_checkpoint`` continues a run. For text-only CPT of a VLM backbone use ``text/cpt_accelerate.py``.

Writes ``<output_dir>/checkpoint-<step>/``, ``final/`` (model + processor) and ``logs/``; default output_dir
``$HOME/results/<model_id>-cpt``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from mlrecipe_scripts.accelerate.common import ScriptError, log, offline_defaults, report_to, run_main, select_precision
from mlrecipe_scripts.accelerate.common import training_arguments as make_training_arguments
from mlrecipe_scripts.hf_trainer.vision_language.training_common import (
    CPT,
    build_datasets,
    build_vlm_parser,
    describe_parameters,
    load_model,
    load_processor,
    parse_checked,
    prepare_data,
    read_splits,
    resolve_paths,
    save_final,
    select_adapter,
)


def build_parser() -> argparse.ArgumentParser:
    """The flags of this script."""
    return build_vlm_parser(__doc__.split("\n")[0], CPT).parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and sanity-check the command line (strict: an unknown flag exits with status 2)."""
    return parse_checked(build_parser(), argv)


def main(argv: list[str] | None = None) -> int:
    """Continue pre-training and save; returns the exit status."""
    args = parse_args(argv)
    if args.list_models:
        from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import print_supported_models

        print_supported_models()
        return 0
    offline_defaults()
    os.environ.setdefault("TORCH_DISTRIBUTED_TIMEOUT", "7200")
    adapter, source, flag = select_adapter(args)
    data_dir, output_dir = resolve_paths(args, CPT)
    if args.resume_from_checkpoint and not Path(args.resume_from_checkpoint).expanduser().is_dir():
        raise ScriptError(f"--resume_from_checkpoint={args.resume_from_checkpoint}: no such directory")
    data_dir = prepare_data(args, data_dir)
    rows = read_splits(data_dir, args.max_eval_samples)

    from transformers import set_seed

    from mlrecipe_scripts.hf_trainer.trainer_callbacks import MetricsFileCallback, script_trainer_class
    from mlrecipe_scripts.hf_trainer.vision_language.base.base_dataset import VLMCollator, VLMCPTDataset

    set_seed(args.seed)
    precision = select_precision()
    log(f"model {source} ({adapter.model_family} adapter): {precision.describe()}; continual pre-training (all "
        f"parameters); vision encoder {'frozen' if args.freeze_vision_encoder else 'trained'}")
    processor, tokenizer = load_processor(adapter, source, flag)
    train_ds, eval_ds = build_datasets(VLMCPTDataset, data_dir, rows, adapter, processor, tokenizer,
                                       args.max_seq_length)

    model = load_model(adapter, source, flag, precision)
    if args.freeze_vision_encoder:
        log(f"vision encoder frozen: {adapter.freeze_vision_encoder(model):,} parameters")
    log(describe_parameters(adapter, model))
    vision_trainable = adapter.vision_is_trainable(model)

    evaluate = eval_ds is not None
    targs = make_training_arguments(
        output_dir=str(output_dir),
        logging_dir=str(output_dir / "logs"),
        num_train_epochs=args.num_train_epochs,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps,
        max_grad_norm=args.max_grad_norm,
        lr_scheduler_type="cosine",
        logging_steps=args.logging_steps,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=args.eval_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": False},
        bf16=precision.bf16,
        fp16=precision.fp16,
        use_cpu=precision.device == "cpu",
        report_to=report_to(args.use_wandb),
        seed=args.seed,
        dataloader_num_workers=args.num_workers,
        dataloader_drop_last=False,
        remove_unused_columns=False,
        ddp_find_unused_parameters=bool(vision_trainable and train_ds.text_only_rows),
    )
    callbacks: list[Any] = [MetricsFileCallback()]
    trainer = script_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds,
        data_collator=VLMCollator(adapter, tokenizer.pad_token_id), processing_class=processor, callbacks=callbacks,
    )
    result = trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    final = output_dir / "final"
    save_final(trainer, adapter, processor, source, final)
    if trainer.is_world_process_zero():
        log(f"done: {result.global_step} steps, train loss {result.training_loss:.4f}; model and processor in "
            f"{final}")
    return 0


if __name__ == "__main__":
    run_main(main)
