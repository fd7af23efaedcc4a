"""Supervised fine-tuning of a vision-language model (LoRA by default, ``--full_ft`` for all parameters) with the
Hugging Face Trainer, under ``accelerate launch``.

The model family is handled by an adapter from ``adapters/registry.py``: a local model directory is matched by its
``config.json`` ``model_type`` (``qwen3_vl``, ``qwen2_5_vl``, ``qwen2_vl`` ...), a hub id by name
(``--list_models`` prints them). Flags are hand-written (family H): ``--freeze_vision_encoder`` is on by default
(``--no_freeze_vision_encoder`` trains the vision tower), ``--lora_on_vision`` also puts LoRA on the vision blocks.

Data: ``--data_dir`` holds ``training.jsonl`` / ``validation.jsonl`` (``{"image": ..., "conversations": [...]}``,
see ``dataset_module.py``; images are local files, URLs or data URIs, relative paths are taken from the JSONL's
directory). With ``--hf_dataset_name`` (hub id or local directory) global rank 0 prepares ``data_dir`` first
(default ``$HOME/datasets/<name>/<config>/train=90%-val=5%-test=5%``; without it ``$HOME/datasets/visual_instruct``).
Labels cover the assistant turns only, for evaluation too (the reference evaluates every token and masks the first
60 % of each training sample instead). Batches larger than 1 are padded by a collator. Precision and attention follow the device (bf16 + sdpa on CUDA with bf16,
fp32 + sdpa on CPU). Nothing is downloaded unless ``HF_HUB_OFFLINE=0``.

Writes ``<output_dir>/checkpoint-<step>/`` at each evaluation that improves ``eval_loss`` (every ``--eval_steps``
when there is no validation row), ``<output_dir>/final/`` (adapter or model + processor) and ``<output_dir>/logs/``;
default output_dir ``$HOME/results/<model_id>``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

_VL_DIR = str(Path(__file__).resolve().parent)
_ACCELERATE_DIR = str(Path(__file__).resolve().parent.parent.parent)
for _p in (_ACCELERATE_DIR, _VL_DIR):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from shared.common import ScriptError, log, offline_defaults, report_to, run_main, select_precision, short_error
from shared.common import training_arguments as make_training_arguments
from training_common import (
    SFT,
    add_dataset_flags,
    add_model_flags,
    add_run_flags,
    build_datasets,
    check_numbers,
    describe_parameters,
    load_model,
    load_processor,
    prepare_data,
    read_splits,
    resolve_paths,
    save_final,
    select_adapter,
)


def build_parser() -> argparse.ArgumentParser:
    """The flags of this script (strict: an unknown flag exits with status 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_flags(parser, SFT)
    lora = parser.add_argument_group("LoRA")
    lora.add_argument("--full_ft", action="store_true", default=False, help="train all parameters (no LoRA)")
    lora.add_argument("--lora_rank", type=int, default=64)
    lora.add_argument("--lora_alpha", type=int, default=16)
    lora.add_argument("--lora_dropout", type=float, default=0.1)
    lora.add_argument("--lora_on_vision", action="store_true", default=False,
                      help="also put LoRA on the vision blocks (attention and MLP)")
    train = parser.add_argument_group("training")
    train.add_argument("--max_steps", type=int, default=10000)
    train.add_argument("--per_device_train_batch_size", type=int, default=1)
    train.add_argument("--per_device_eval_batch_size", type=int, default=1)
    train.add_argument("--gradient_accumulation_steps", type=int, default=16)
    train.add_argument("--learning_rate", type=float, default=2e-5)
    train.add_argument("--weight_decay", type=float, default=0.01)
    train.add_argument("--warmup_steps", type=int, default=100)
    train.add_argument("--max_grad_norm", type=float, default=1.0)
    train.add_argument("--max_seq_length", type=int, default=8192)
    train.add_argument("--early_stopping_patience", type=int, default=3)
    train.add_argument("--early_stopping_threshold", type=float, default=0.001)
    add_dataset_flags(parser, SFT)
    add_run_flags(parser, max_eval_samples=640)
    parser.add_argument("--eval_steps", type=int, default=100)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and sanity-check the command line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_numbers(args, parser)
    return args


def apply_lora(model: Any, adapter: Any, args: argparse.Namespace, flag: str = "--model_path") -> Any:
    """Wrap ``model`` with LoRA (task CAUSAL_LM, bias none) on the adapter's target modules."""
    from peft import LoraConfig, get_peft_model

    target = adapter.lora_target_regex(include_vision=args.lora_on_vision)
    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                        target_modules=target, bias="none", task_type="CAUSAL_LM")
    try:
        model = get_peft_model(model, config)
    except ValueError as exc:
        raise ScriptError(f"{flag}: LoRA targets {adapter.get_lora_target_modules(args.lora_on_vision)} match "
                          f"no module of the model ({short_error(exc)})") from exc
    model.enable_input_require_grads()  # gradients reach the adapters through checkpointed layers
    return model


def main(argv: list[str] | None = None) -> int:
    """Fine-tune and save; returns the exit status."""
    args = parse_args(argv)
    if args.list_models:
        from adapters.registry import print_supported_models

        print_supported_models()
        return 0
    offline_defaults()
    os.environ.setdefault("TORCH_DISTRIBUTED_TIMEOUT", "7200")
    adapter, source, flag = select_adapter(args)
    data_dir, output_dir = resolve_paths(args, SFT)
    data_dir = prepare_data(args, data_dir)
    rows = read_splits(data_dir, args.max_eval_samples)

    from base.base_dataset import VLMCollator, VLMDataset
    from shared.callbacks import MetricsFileCallback, SaveOnBestMetricCallback
    from transformers import EarlyStoppingCallback, Trainer, set_seed

    set_seed(args.seed)
    precision = select_precision()
    log(f"model {source} ({adapter.model_family} adapter): {precision.describe()}; "
        f"{'full fine-tuning' if args.full_ft else 'LoRA' + (' (vision too)' if args.lora_on_vision else '')}; "
        f"vision encoder {'frozen' if args.freeze_vision_encoder else 'trained'}")
    processor, tokenizer = load_processor(adapter, source, flag)
    train_ds, eval_ds = build_datasets(VLMDataset, data_dir, rows, adapter, processor, tokenizer,
                                       args.max_seq_length)

    model = load_model(adapter, source, flag, precision)
    if args.freeze_vision_encoder:
        log(f"vision encoder frozen: {adapter.freeze_vision_encoder(model):,} parameters")
    if not args.full_ft:
        model = apply_lora(model, adapter, args, flag)
    log(describe_parameters(adapter, model))
    vision_trainable = adapter.vision_is_trainable(model)

    evaluate = eval_ds is not None
    if not evaluate:
        log("note: no validation rows: no evaluation, no early stopping; saving every --eval_steps")
    targs = make_training_arguments(
        output_dir=str(output_dir),
        logging_dir=str(output_dir / "logs"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps,
        max_grad_norm=args.max_grad_norm,
        logging_steps=args.logging_steps,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=args.eval_steps,
        save_strategy="no" if evaluate else "steps",
        save_steps=args.eval_steps,
        save_total_limit=2,
        metric_for_best_model="eval_loss" if evaluate else None,
        greater_is_better=False,
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
        # text-only rows leave a trainable vision tower without gradients on that step
        ddp_find_unused_parameters=bool(vision_trainable and train_ds.text_only_rows),
    )
    callbacks: list[Any] = [MetricsFileCallback()]
    if evaluate:
        callbacks += [EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience,
                                            early_stopping_threshold=args.early_stopping_threshold),
                      SaveOnBestMetricCallback()]
    trainer = Trainer(model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds,
                      data_collator=VLMCollator(adapter, tokenizer.pad_token_id), processing_class=processor,
                      callbacks=callbacks)
    result = trainer.train()
    final = output_dir / "final"
    save_final(trainer, adapter, processor, source, final)
    if trainer.is_world_process_zero():
        log(f"done: {result.global_step} steps, train loss {result.training_loss:.4f}; "
            f"{'model' if args.full_ft else 'adapter'} and processor in {final}")
    return 0


if __name__ == "__main__":
    run_main(main)
