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
60 % of each training sample instead). Batches larger than 1 are padded by a collator. Precision and attention
follow the device (bf16 + sdpa on CUDA with bf16,
fp32 + sdpa on CPU). Nothing is downloaded unless ``HF_HUB_OFFLINE=0``.

Writes ``<output_dir>/checkpoint-<step>/`` at each evaluation that improves ``eval_loss`` (every ``--eval_steps``
when there is no validation row), ``<output_dir>/final/`` (adapter or model + processor) and ``<output_dir>/logs/``;
default output_dir ``$HOME/results/<model_id>``.
"""

from __future__ import annotations

import argparse
import os

from mlrecipe_scripts.accelerate.common import (
    log,
    offline_defaults,
    run_main,
    select_precision,
    step_training_arguments,
)
from mlrecipe_scripts.hf_trainer.vision_language.training_common import (
    SFT,
    apply_lora,
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
    return build_vlm_parser(__doc__.split("\n")[0], SFT).parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and sanity-check the command line (strict: an unknown flag exits with status 2)."""
    return parse_checked(build_parser(), argv)


def main(argv: list[str] | None = None) -> int:
    """Fine-tune and save; returns the exit status."""
    args = parse_args(argv)
    if args.list_models:
        from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import print_supported_models

        print_supported_models()
        return 0
    offline_defaults()
    os.environ.setdefault("TORCH_DISTRIBUTED_TIMEOUT", "7200")
    adapter, source, flag = select_adapter(args)
    data_dir, output_dir = resolve_paths(args, SFT)
    data_dir = prepare_data(args, data_dir)
    rows = read_splits(data_dir, args.max_eval_samples)

    from transformers import set_seed

    from mlrecipe_scripts.hf_trainer.trainer_callbacks import script_trainer_class, step_callbacks
    from mlrecipe_scripts.hf_trainer.vision_language.base.base_dataset import VLMCollator, VLMDataset

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
    targs = step_training_arguments(
        args, output_dir, precision, evaluate, gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": False}, dataloader_drop_last=False,
        # text-only rows leave a trainable vision tower without gradients on that step
        ddp_find_unused_parameters=bool(vision_trainable and train_ds.text_only_rows))
    callbacks = step_callbacks(args, evaluate)
    trainer = script_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds,
        data_collator=VLMCollator(adapter, tokenizer.pad_token_id), processing_class=processor, callbacks=callbacks,
    )
    result = trainer.train()
    final = output_dir / "final"
    save_final(trainer, adapter, processor, source, final)
    if trainer.is_world_process_zero():
        log(f"done: {result.global_step} steps, train loss {result.training_loss:.4f}; "
            f"{'model' if args.full_ft else 'adapter'} and processor in {final}")
    return 0


if __name__ == "__main__":
    run_main(main)
