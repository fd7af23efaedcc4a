"""LoRA (or ``--full_ft``) supervised fine-tuning of a causal LM with the Hugging Face Trainer.

Run it under ``accelerate launch`` (any accelerate config: FSDP, DDP, one process, CPU). Flags are the fields of
:class:`ScriptArguments` (family D0): only the flags given override the defaults; a boolean flag flips its default
(so ``--trust_remote_code`` sets it to False and ``--full_ft`` to True); ``--lora_target_modules`` is a comma list;
``--hfdc_*`` rebuild the dataset config (then ``--hfdc_dataset_name`` is required).

Data: ``--data_dir`` (default ``$HOME/datasets/<name>/<config>/train=90%-val=5%-test=5%``) is prepared by global
rank 0 unless it already holds ``.data_ready``. Nothing is downloaded unless ``HF_HUB_OFFLINE=0`` is set.

What follows the device (``--gradient_checkpointing=true|false`` forces the one setting that has a flag):

* precision and attention: bf16 + sdpa where CUDA has bf16, fp32 + sdpa on CPU;
* activation (gradient) checkpointing, non-reentrant: on with CUDA, where memory is the limit (as the reference
  does for the 8B-14B models), off on CPU, where it only recomputes the forward (about 1.8x the step time on a
  small model) and memory is rarely short;
* padding: each batch is padded to its longest row, rounded up to a multiple of 8 with CUDA (tensor-core shapes),
  not rounded on CPU.

Writes ``<output_dir>/checkpoint-<step>/`` at each evaluation that improves ``eval_loss`` (default output_dir
``$HOME/results/<hf_model_id>``), ``<output_dir>/final/`` (model or adapter + tokenizer) and ``<output_dir>/logs/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.accelerate.common import (
    DEFAULT_LORA_TARGETS,
    ScriptError,
    build_from_namespace,
    check_model_source,
    comma_list,
    dataclass_parser,
    load_causal_lm,
    load_tokenizer,
    log,
    offline_defaults,
    on_off_auto,
    results_dir,
    run_main,
    save_final_model,
    select_precision,
    short_error,
    step_training_arguments,
    switch_on,
)
from mlrecipe_scripts.hf_trainer.text_dataset import (
    HFDC_NOT_ON_CLI,
    HFDatasetConfig,
    SFTDataset,
    default_data_dir,
    make_collator,
    prepare_datasets,
    sft_default_config,
)


@dataclass
class ScriptArguments:
    """The flags of this script (one ``--<field>`` each; ``hfdc`` becomes ``--hfdc_<field>``)."""

    hf_model_id: str = "Qwen/Qwen3-8B"
    model_path: str | None = None
    trust_remote_code: bool = True
    full_ft: bool = False
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: list[str] = field(default_factory=lambda: comma_list(DEFAULT_LORA_TARGETS))
    hfdc: HFDatasetConfig = field(default_factory=sft_default_config)
    max_steps: int = 10000
    per_device_train_batch_size: int = 2
    per_device_eval_batch_size: int = 2
    gradient_accumulation_steps: int = 4
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    early_stopping_patience: int = 3
    early_stopping_threshold: float = 0.001
    max_seq_length: int = 2048
    data_dir: str | None = None
    output_dir: str | None = None
    logging_steps: int = 10
    eval_steps: int = 100
    max_eval_samples: int = 640
    use_wandb: bool = False
    seed: int = 42
    num_workers: int = 8
    use_liger_kernel: bool = False
    gradient_checkpointing: str = field(default="auto", metadata={"argparse": {
        "type": on_off_auto, "nargs": "?", "const": "true", "metavar": "{true,false,auto}",
        "help": "activation (gradient) checkpointing, non-reentrant: auto = on with CUDA (memory-bound), off on "
                "CPU; true / false (or the bare flag: true) force it"}})


NESTED = {"hfdc": (HFDatasetConfig, HFDC_NOT_ON_CLI)}


def build_parser() -> Any:
    """The argparse parser (family D0)."""
    return dataclass_parser(ScriptArguments, "D0", description=__doc__.split("\n")[0], nested=NESTED)


def parse_args(argv: list[str] | None = None) -> ScriptArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    return build_from_namespace(ScriptArguments, parser.parse_args(argv), parser, nested=NESTED)


def use_checkpointing(args: ScriptArguments, device: str) -> bool:
    """Whether to train with activation checkpointing: ``--gradient_checkpointing``, ``auto`` = only with CUDA."""
    return switch_on(args.gradient_checkpointing, auto=device == "cuda")


def apply_lora(model: Any, args: ScriptArguments, checkpointing: bool = True) -> Any:
    """Wrap ``model`` with a LoRA adapter (task CAUSAL_LM, bias none) on ``--lora_target_modules``.

    With ``checkpointing`` the embedding outputs require grad, so that gradients reach the adapters through the
    checkpointed layers.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                        target_modules=list(args.lora_target_modules), bias="none", task_type="CAUSAL_LM")
    try:
        model = get_peft_model(model, config)
    except ValueError as exc:
        raise ScriptError(f"--lora_target_modules={','.join(args.lora_target_modules)}: {short_error(exc)}") from exc
    if checkpointing:
        model.enable_input_require_grads()
    return model


def count_parameters(model: Any) -> str:
    """``trainable X / total Y (Z%)``."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"trainable {trainable:,} / total {total:,} ({100 * trainable / max(total, 1):.2f}%)"


def main(argv: list[str] | None = None) -> int:
    """Fine-tune and save; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if args.model_path else "--hf_model_id"
    model_path = check_model_source(args.model_path or args.hf_model_id, flag)
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_data_dir(args.hfdc)
    output_dir = Path(args.output_dir).expanduser() if args.output_dir else results_dir(args.hf_model_id)
    if not args.full_ft and not args.lora_target_modules:
        raise ScriptError("--lora_target_modules: empty list")

    import os

    poll = float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "5"))
    prepare_datasets(args.hfdc, data_dir, poll_seconds=poll)

    from mlrecipe_scripts.hf_trainer.trainer_callbacks import script_trainer_class, step_callbacks

    precision = select_precision()
    checkpointing = use_checkpointing(args, precision.device)
    log(f"model {model_path}: {precision.describe()}; {'full fine-tuning' if args.full_ft else 'LoRA'}; "
        f"activation checkpointing {'on' if checkpointing else 'off'} "
        f"(--gradient_checkpointing={args.gradient_checkpointing})")
    tokenizer = load_tokenizer(model_path, args.trust_remote_code, padding_side="right", flag=flag)
    train_ds = SFTDataset(data_dir / "training.jsonl", tokenizer, args.max_seq_length)
    eval_ds = SFTDataset(data_dir / "validation.jsonl", tokenizer, args.max_seq_length, args.max_eval_samples)
    if len(train_ds) == 0:
        raise ScriptError(f"{train_ds.path}: no training rows")
    log(f"data {data_dir}: {len(train_ds)} training rows, {len(eval_ds)} validation rows used for evaluation")

    model = load_causal_lm(model_path, flag, dtype=precision.dtype, attn_implementation=precision.attn_implementation,
                           trust_remote_code=args.trust_remote_code, use_cache=False)
    if not args.full_ft:
        model = apply_lora(model, args, checkpointing)
    log(count_parameters(model))

    evaluate = len(eval_ds) > 0
    if not evaluate:
        log("note: the validation split is empty: no evaluation, no early stopping; saving every eval_steps")
    targs = step_training_arguments(
        args, output_dir, precision, evaluate, gradient_checkpointing=checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
        use_liger_kernel=args.use_liger_kernel)
    callbacks = step_callbacks(args, evaluate)
    trainer = script_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds if evaluate else None,
        data_collator=make_collator(tokenizer, 8 if precision.device == "cuda" else None), processing_class=tokenizer,
        callbacks=callbacks,
    )
    result = trainer.train()
    final = output_dir / "final"
    save_final_model(trainer, tokenizer, final)
    if trainer.is_world_process_zero():
        log(f"done: {result.global_step} steps, train loss {result.training_loss:.4f}; model in {final}")
    return 0


if __name__ == "__main__":
    run_main(main)
