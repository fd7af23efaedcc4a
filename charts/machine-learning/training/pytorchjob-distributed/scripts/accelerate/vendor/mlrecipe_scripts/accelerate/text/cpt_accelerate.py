"""Continual pre-training (all parameters, no LoRA) of a causal LM with the Hugging Face Trainer, epoch based.

Run it under ``accelerate launch``. Flags are the fields of :class:`ScriptArguments` (family D0, as in
``peft_accelerate.py``): only the flags given override the defaults, ``--trust_remote_code`` sets it to False,
``--hfdc_*`` rebuild the dataset config (then ``--hfdc_dataset_name`` is required; ``--hfdc_field_mapping=""``
means none). The default dataset is Wikipedia (``wikimedia/wikipedia`` ``20231101.en``, 99.5 % training, text
template ``{text}``) and the default ``--data_dir`` names its split with two decimals
(``train=99.50%-val=0.25%-test=0.25%``). A ``data_dir`` holding ``.data_ready`` is used as is (offline).

Every token is a target (no prompt masking); the learning rate follows a cosine schedule; evaluation and
checkpoints happen every ``--eval_steps`` / ``--save_steps`` (rotating, ``--save_total_limit``); the tokenizer is
saved in each checkpoint. Writes ``<output_dir>/checkpoint-<step>/``, ``final/`` and ``logs/`` (default output_dir
``$HOME/results/<hf_model_id with / -> _>-cpt``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.accelerate.common import (
    ScriptError,
    build_from_namespace,
    check_model_source,
    dataclass_parser,
    home_dir,
    load_causal_lm,
    load_tokenizer,
    log,
    offline_defaults,
    report_to,
    run_main,
    save_final_model,
    select_precision,
    training_arguments,
)
from mlrecipe_scripts.hf_trainer.text_dataset import (
    HFDC_NOT_ON_CLI,
    CPTDataset,
    HFDatasetConfig,
    cpt_default_config,
    default_data_dir,
    make_collator,
    prepare_datasets,
)


@dataclass
class ScriptArguments:
    """The flags of this script (one ``--<field>`` each; ``hfdc`` becomes ``--hfdc_<field>``)."""

    hf_model_id: str = "Qwen/Qwen3-8B"
    model_path: str | None = None
    trust_remote_code: bool = True
    hfdc: HFDatasetConfig = field(default_factory=cpt_default_config)
    num_train_epochs: int = 3
    per_device_train_batch_size: int = 1
    per_device_eval_batch_size: int = 1
    gradient_accumulation_steps: int = 8
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 1000
    max_grad_norm: float = 1.0
    max_seq_length: int = 4096
    data_dir: str | None = None
    output_dir: str | None = None
    resume_from_checkpoint: str | None = None
    save_steps: int = 1000
    save_total_limit: int = 2
    logging_steps: int = 10
    eval_steps: int = 1000
    max_eval_samples: int | None = None
    use_wandb: bool = False
    seed: int = 42
    num_workers: int = 4
    use_liger_kernel: bool = False


NESTED = {"hfdc": (HFDatasetConfig, HFDC_NOT_ON_CLI)}


def build_parser() -> Any:
    """The argparse parser (family D0)."""
    return dataclass_parser(ScriptArguments, "D0", description=__doc__.split("\n")[0], nested=NESTED)


def parse_args(argv: list[str] | None = None) -> ScriptArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    return build_from_namespace(ScriptArguments, parser.parse_args(argv), parser, nested=NESTED)


def default_output_dir(hf_model_id: str, home: Path | None = None) -> Path:
    """``$HOME/results/<hf_model_id with / -> _>-cpt``."""
    return (home or home_dir()) / "results" / f"{hf_model_id.strip('/').replace('/', '_')}-cpt"


def main(argv: list[str] | None = None) -> int:
    """Continue pre-training and save; returns the exit status."""
    import os

    args = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if args.model_path else "--hf_model_id"
    model_path = check_model_source(args.model_path or args.hf_model_id, flag)
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_data_dir(args.hfdc, decimals=2)
    output_dir = Path(args.output_dir).expanduser() if args.output_dir else default_output_dir(args.hf_model_id)
    if args.resume_from_checkpoint and not Path(args.resume_from_checkpoint).expanduser().is_dir():
        raise ScriptError(f"--resume_from_checkpoint={args.resume_from_checkpoint}: no such directory")

    prepare_datasets(args.hfdc, data_dir, poll_seconds=float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "5")))

    from mlrecipe_scripts.hf_trainer.trainer_callbacks import MetricsFileCallback, script_trainer_class

    precision = select_precision()
    log(f"model {model_path}: {precision.describe()}; continual pre-training (all parameters)")
    tokenizer = load_tokenizer(model_path, args.trust_remote_code, padding_side="right", flag=flag)
    train_ds = CPTDataset(data_dir / "training.jsonl", tokenizer, args.max_seq_length)
    eval_ds = CPTDataset(data_dir / "validation.jsonl", tokenizer, args.max_seq_length, args.max_eval_samples)
    if len(train_ds) == 0:
        raise ScriptError(f"{train_ds.path}: no training rows")
    log(f"data {data_dir}: {len(train_ds)} training rows, {len(eval_ds)} validation rows")

    model = load_causal_lm(model_path, flag, dtype=precision.dtype, attn_implementation=precision.attn_implementation,
                           trust_remote_code=args.trust_remote_code, use_cache=False)
    evaluate = len(eval_ds) > 0
    targs = training_arguments(
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
        remove_unused_columns=False,
        ddp_find_unused_parameters=False,
        use_liger_kernel=args.use_liger_kernel,
    )
    trainer = script_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds if evaluate else None,
        data_collator=make_collator(tokenizer), processing_class=tokenizer, callbacks=[MetricsFileCallback()],
    )
    result = trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    final = output_dir / "final"
    save_final_model(trainer, tokenizer, final)
    if trainer.is_world_process_zero():
        log(f"done: {result.global_step} steps, train loss {result.training_loss:.4f}; model in {final}")
    return 0


if __name__ == "__main__":
    run_main(main)
