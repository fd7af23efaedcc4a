"""Continual pre-training (all parameters, every token a target, epoch based) with the HF Trainer inside Ray Train.

Run it as the Ray job driver: ``cd $SCRIPTS_DIR && python text/cpt_ray_train.py --hf_model_id=... ...``. Flags are
the fields of :class:`CPTArguments` (family D0: only the flags given override the defaults; ``--trust_remote_code``
sets it to False, as in the reference; ``--hfdc_*`` rebuild the dataset config, then ``--hfdc_dataset_name`` is
required; ``--hfdc_field_mapping=""`` gives None). ``--num_workers`` is the number of DataLoader workers, as in the
reference; ``--ray_num_workers`` / ``--ray_cpus_per_worker`` (mlrecipe additions) size the Ray worker group.

Ray, devices and precision as in ``ray_train_sft.py``: ``RAY_ADDRESS`` joins a cluster, else a local Ray is started
and stopped; one GPU worker per GPU with ``nccl``, bf16 and FSDP (full_shard, auto_wrap, full state dict, activation
checkpointing) as the reference; without GPUs 2 CPU workers with ``gloo``, fp32, DDP.

Data: ``--data_dir`` (default ``$HOME/datasets/<name>/<config>/train=99.50%-val=0.25%-test=0.25%`` for the default
wikipedia dataset) is prepared by world rank 0 unless it holds ``.data_ready``. Cosine schedule; evaluation and a
checkpoint every ``--eval_steps`` / ``--save_steps``.

Writes Ray checkpoints ``<results_dir>/<hf_model_id with / -> ->-cpt/checkpoint_<step>/checkpoint/`` (the full model
plus the tokenizer; Ray keeps the newest 2), the HF scratch ``<results_dir>/checkpoint-<step>/`` (rotating,
``--save_total_limit``), ``train_results.json`` and ``logs/`` in ``<results_dir>``. ``--resume_from_checkpoint``
takes an HF checkpoint directory (e.g. a Ray checkpoint's ``checkpoint/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer.text_dataset import (
    HFDC_NOT_ON_CLI,
    CPTDataset,
    HFDatasetConfig,
    cpt_default_config,
    default_data_dir,
    load_and_prepare_datasets,
    make_collator,
)
from mlrecipe_scripts.ray_train.common import (
    ScriptError,
    args_from_dict,
    args_to_dict,
    build_from_namespace,
    check_model_source,
    count_parameters,
    dataclass_parser,
    load_causal_lm,
    load_tokenizer,
    log,
    offline_defaults,
    report_to,
    results_root,
    run_main,
    run_name,
    training_arguments,
)
from mlrecipe_scripts.ray_train.text.ray_train_sft import (
    CPU_HELP,
    FSDP_CONFIG,
    RAY_HELP,
    check_dataset_source,
    log_done,
)


@dataclass
class CPTArguments:
    """The flags of this script (one ``--<field>`` each; ``hfdc`` becomes ``--hfdc_<field>``)."""

    model_path: str | None = None
    hf_model_id: str = "Qwen/Qwen3-8B"
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
    lr_scheduler_type: str = "cosine"
    max_seq_length: int = 4096
    data_dir: str | None = None
    results_dir: str = "results"
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
    ray_num_workers: int | None = field(default=None, metadata={"help": RAY_HELP})
    ray_cpus_per_worker: int | None = field(default=None, metadata={"help": CPU_HELP})


NESTED = {"hfdc": (HFDatasetConfig, HFDC_NOT_ON_CLI)}


WORKER_MODULE = "mlrecipe_scripts.ray_train.text.cpt_ray_train"  # what the Ray workers import


def build_parser() -> Any:
    """The argparse parser (family D0)."""
    return dataclass_parser(CPTArguments, "D0", description=__doc__.split("\n")[0], nested=NESTED)


def parse_args(argv: list[str] | None = None) -> CPTArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    return build_from_namespace(CPTArguments, parser.parse_args(argv), parser, nested=NESTED)


# --------------------------------------------------------------------------------------------------------------
# worker side


def train_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: data, full model, Trainer saving every ``--save_steps`` through Ray."""
    import ray.train

    from mlrecipe_scripts.ray_train.ray_callbacks import (
        MetricsFileCallback,
        RayCheckpointReportCallback,
        script_trainer_class,
    )
    from mlrecipe_scripts.ray_train.ray_launch import worker_setup

    args = args_from_dict(CPTArguments, config["args"])
    ctx = worker_setup(config)
    precision = ctx.precision
    model_path, flag = config["model_path"], config["model_flag"]
    data_dir, results = Path(config["data_dir"]), Path(config["results"])
    if ctx.is_main:
        log(f"worker 0 of {ctx.world_size}: model {model_path}: {precision.describe()}; continual pre-training")
    tokenizer = load_tokenizer(model_path, args.trust_remote_code, padding_side="right", flag=flag)
    train_ds, eval_ds = load_and_prepare_datasets(args.hfdc, data_dir, tokenizer, args.max_seq_length, ctx.rank,
                                                  CPTDataset, args.max_eval_samples)
    if len(train_ds) == 0:
        raise ScriptError(f"{train_ds.path}: no training rows")
    if ctx.is_main:
        log(f"data {data_dir}: {len(train_ds)} training rows, {len(eval_ds)} validation rows")
    model = load_causal_lm(model_path, flag, dtype=precision.dtype, attn_implementation=precision.attn_implementation,
                           trust_remote_code=args.trust_remote_code, use_cache=False)
    if ctx.is_main:
        log(count_parameters(model))
    gpu = precision.device == "cuda"
    evaluate = len(eval_ds) > 0
    fsdp = {"fsdp": ["full_shard", "auto_wrap"],
            "fsdp_config": {**FSDP_CONFIG, "fsdp_activation_checkpointing": True,
                            "fsdp_activation_checkpointing_reentrant": False}} if gpu else {}
    targs = training_arguments(
        output_dir=str(results),
        logging_dir=str(results / "logs"),
        num_train_epochs=args.num_train_epochs,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps,
        lr_scheduler_type=args.lr_scheduler_type,
        max_grad_norm=args.max_grad_norm,
        logging_steps=args.logging_steps,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=args.eval_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        bf16=precision.bf16,
        fp16=precision.fp16,
        use_cpu=not gpu,
        dataloader_num_workers=args.num_workers,
        dataloader_drop_last=False,
        remove_unused_columns=False,
        report_to=report_to(args.use_wandb),
        seed=args.seed,
        optim="adamw_torch_fused" if gpu else "adamw_torch",
        ddp_backend=config["_backend"],
        ddp_find_unused_parameters=False,
        ddp_timeout=7200,
        save_on_each_node=False,
        use_liger_kernel=args.use_liger_kernel,
        **fsdp,
    )
    trainer = script_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds if evaluate else None,
        data_collator=make_collator(tokenizer), processing_class=tokenizer,
        callbacks=[MetricsFileCallback(), RayCheckpointReportCallback()],
    )
    resume = args.resume_from_checkpoint
    if resume and not Path(resume).expanduser().is_dir():
        raise ScriptError(f"--resume_from_checkpoint={resume}: no such directory")
    result = trainer.train(resume_from_checkpoint=resume)
    metrics = {k: v for k, v in result.metrics.items() if isinstance(v, int | float)}
    if trainer.is_world_process_zero():
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
    ray.train.report({**metrics, "step": int(result.global_step)})


# --------------------------------------------------------------------------------------------------------------
# driver side


def main(argv: list[str] | None = None) -> int:
    """Validate the flags, then run the workers on Ray; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if args.model_path else "--hf_model_id"
    model_path = check_model_source(args.model_path or args.hf_model_id, flag)
    if Path(model_path).expanduser().is_dir():
        model_path = str(Path(model_path).expanduser().resolve())
    data_dir = Path(args.data_dir).expanduser().absolute() if args.data_dir else \
        default_data_dir(args.hfdc, decimals=2)
    check_dataset_source(args.hfdc, data_dir)
    if args.resume_from_checkpoint and not Path(args.resume_from_checkpoint).expanduser().is_dir():
        raise ScriptError(f"--resume_from_checkpoint={args.resume_from_checkpoint}: no such directory")
    results = results_root(args.results_dir)
    name = f"{run_name(args.hf_model_id)}-cpt"
    from mlrecipe_scripts.ray_train import ray_launch

    started = ray_launch.init_ray()
    try:
        plan = ray_launch.plan_workers(args.ray_num_workers, args.ray_cpus_per_worker, started_here=started)
        log(f"Ray Train CPT of {model_path}: {plan.describe()}; data {data_dir}; Ray run {results / name}")
        results.mkdir(parents=True, exist_ok=True)
        result = ray_launch.fit(WORKER_MODULE, args_to_dict(args), plan, name, results, extra={
            "model_path": model_path, "model_flag": flag, "data_dir": str(data_dir), "results": str(results)})
    finally:
        ray_launch.shutdown_ray()
    log_done(result, results)
    return 0


if __name__ == "__main__":
    run_main(main)
