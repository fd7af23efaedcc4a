"""LoRA (or ``--full_ft``) supervised fine-tuning of a causal LM: the Hugging Face Trainer inside Ray Train.

Run it as the Ray job driver: ``cd $SCRIPTS_DIR && python text/ray_train_sft.py --hf_model_id=... ...``. Flags are
the fields of :class:`ScriptArguments` (family D0): only the flags given override the defaults; a boolean flag flips
its default (``--full_ft`` and ``--remove_unused_columns`` set True); ``--lora_target_modules`` is a comma list;
``--hfdc_*`` rebuild the dataset config (then ``--hfdc_dataset_name`` is required). ``--ray_num_workers`` and
``--ray_cpus_per_worker`` are mlrecipe additions (see ``shared/ray_launch.py``).

Ray: joins the cluster in ``RAY_ADDRESS`` (a KubeRay job's driver), else starts a local Ray for the run and stops
it at the end. Workers: one per GPU with ``nccl``, bf16 and FSDP (full_shard, auto_wrap, full state dict), as the
reference; without GPUs 2 CPU workers with ``gloo``, fp32 and DDP. Attention is sdpa (``MLRECIPE_ATTN_IMPLEMENTATION``
overrides it, e.g. ``flash_attention_2``). Nothing is downloaded unless ``HF_HUB_OFFLINE=0``.

Data: ``--data_dir`` (default ``$HOME/datasets/<name>/<config>/train=90%-val=5%-test=5%``) is prepared by world rank 0
unless it holds ``.data_ready``; the other ranks wait for the marker.

Writes: Ray checkpoints ``<results_dir>/<hf_model_id with / -> ->/checkpoint_<step>/checkpoint/`` (an HF checkpoint:
the LoRA adapter or the full model, plus the tokenizer; only at evaluations that improve ``eval_loss``; Ray keeps the
newest 2), the HF Trainer's scratch ``<results_dir>/checkpoint-<step>/``, ``train_results.json`` and
``all_results.json`` in ``<results_dir>``, TensorBoard logs in ``--logging_dir`` (default ``<results_dir>/logs``).
``--results_dir`` is joined to ``$HOME`` (an absolute path is kept). ``--min_learning_rate`` is accepted and unused,
as in the reference.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer.text_dataset import (
    HFDC_NOT_ON_CLI,
    HFDatasetConfig,
    SFTDataset,
    default_data_dir,
    load_and_prepare_datasets,
    make_collator,
    sft_default_config,
)
from mlrecipe_scripts.ray_train.common import (
    DEFAULT_LORA_TARGETS,
    ScriptError,
    args_from_dict,
    args_to_dict,
    build_from_namespace,
    check_model_source,
    comma_list,
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
    short_error,
    training_arguments,
)

RAY_HELP = "mlrecipe addition: number of Ray Train workers (default: one per GPU; 2 without GPUs)"
CPU_HELP = "mlrecipe addition: CPUs per Ray Train worker (default: min(4, CPUs/GPU); an equal share without GPUs)"


@dataclass
class ScriptArguments:
    """The flags of this script (one ``--<field>`` each; ``hfdc`` becomes ``--hfdc_<field>``)."""

    model_path: str | None = None
    hf_model_id: str = "Qwen/Qwen3-8B"
    data_dir: str | None = None
    results_dir: str = "results"
    max_steps: int = 10000
    per_device_train_batch_size: int = 2
    per_device_eval_batch_size: int = 2
    gradient_accumulation_steps: int = 4
    learning_rate: float = 5e-5
    min_learning_rate: float = 1e-6
    weight_decay: float = 0.01
    warmup_ratio: float = 0.03
    max_grad_norm: float = 1.0
    lr_scheduler_type: str = "cosine"
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: list[str] = field(default_factory=lambda: comma_list(DEFAULT_LORA_TARGETS))
    full_ft: bool = False
    hfdc: HFDatasetConfig = field(default_factory=sft_default_config)
    max_seq_length: int = 2048
    logging_steps: int = 10
    save_steps: int = 100
    eval_steps: int = 100
    save_total_limit: int = 2
    max_eval_samples: int = 640
    use_wandb: bool = False
    seed: int = 16257
    dataloader_num_workers: int = 4
    remove_unused_columns: bool = False
    logging_dir: str | None = None
    early_stopping_patience: int = 3
    early_stopping_threshold: float = 0.001
    use_liger_kernel: bool = False
    ray_num_workers: int | None = field(default=None, metadata={"help": RAY_HELP})
    ray_cpus_per_worker: int | None = field(default=None, metadata={"help": CPU_HELP})


NESTED = {"hfdc": (HFDatasetConfig, HFDC_NOT_ON_CLI)}
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt")

# FSDP on GPUs, as the reference (the keys lose their "fsdp_" prefix inside transformers)
FSDP_CONFIG = {
    "fsdp_sharding_strategy": "FULL_SHARD",
    "fsdp_state_dict_type": "FULL_STATE_DICT",
    "fsdp_offload_params": False,
    "fsdp_backward_prefetch": "BACKWARD_PRE",
    "fsdp_forward_prefetch": False,
    "fsdp_use_orig_params": True,
    "fsdp_cpu_ram_efficient_loading": True,
    "fsdp_sync_module_states": True,
    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
}


WORKER_MODULE = "mlrecipe_scripts.ray_train.text.ray_train_sft"  # what the Ray workers import


def build_parser() -> Any:
    """The argparse parser (family D0)."""
    return dataclass_parser(ScriptArguments, "D0", description=__doc__.split("\n")[0], nested=NESTED)


def parse_args(argv: list[str] | None = None) -> ScriptArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    return build_from_namespace(ScriptArguments, parser.parse_args(argv), parser, nested=NESTED)


def check_dataset_source(config: HFDatasetConfig, data_dir: Path) -> None:
    """Fail early, before Ray starts, on a local dataset path that cannot work (unless data_dir is prepared)."""
    if (data_dir / ".data_ready").exists():
        return
    if not 0 < config.train_split_ratio < 1:
        raise ScriptError(f"--hfdc_train_split_ratio={config.train_split_ratio}: must be between 0 and 1 "
                          "(exclusive)")
    name = config.dataset_name
    local = Path(name).expanduser()
    if local.exists() and not local.is_dir():
        raise ScriptError(f"--hfdc_dataset_name={name}: a file is not a dataset; put it in a directory and pass "
                          "the directory")
    if not local.exists() and name.startswith(("/", ".", "~")):
        raise ScriptError(f"--hfdc_dataset_name={name}: no such directory")
    if local.is_dir() and not any(p.is_file() and p.suffix in DATA_SUFFIXES and p.stat().st_size
                                  for p in local.rglob("*")):
        raise ScriptError(f"--hfdc_dataset_name={name}: the directory holds no non-empty "
                          ".jsonl/.json/.csv/.parquet file")


def resolve_paths(args: ScriptArguments) -> tuple[str, str, Path, Path]:
    """(model path, the flag naming it, data_dir, results root), validated and absolute."""
    flag = "--model_path" if args.model_path else "--hf_model_id"
    model_path = check_model_source(args.model_path or args.hf_model_id, flag)
    if Path(model_path).expanduser().is_dir():
        model_path = str(Path(model_path).expanduser().resolve())
    data_dir = Path(args.data_dir).expanduser().absolute() if args.data_dir else default_data_dir(args.hfdc)
    return model_path, flag, data_dir, results_root(args.results_dir)


# --------------------------------------------------------------------------------------------------------------
# worker side


def apply_lora(model: Any, args: ScriptArguments) -> Any:
    """Wrap ``model`` with a LoRA adapter (task CAUSAL_LM, bias none) on ``--lora_target_modules``."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                        target_modules=list(args.lora_target_modules), bias="none", task_type="CAUSAL_LM")
    try:
        model = get_peft_model(model, config)
    except ValueError as exc:
        raise ScriptError(f"--lora_target_modules={','.join(args.lora_target_modules)}: {short_error(exc)}") from exc
    model.enable_input_require_grads()  # gradients reach the adapters through checkpointed layers
    return model


def train_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: data, model, Trainer with the Ray checkpoint callback, training."""
    import ray.train
    import torch
    from transformers import EarlyStoppingCallback

    from mlrecipe_scripts.ray_train.ray_callbacks import (
        MetricsFileCallback,
        RayCheckpointReportCallback,
        SaveOnBestMetricCallback,
        script_trainer_class,
    )
    from mlrecipe_scripts.ray_train.ray_launch import worker_setup

    args = args_from_dict(ScriptArguments, config["args"])
    ctx = worker_setup(config)
    precision = ctx.precision
    model_path, flag, data_dir, results = config["model_path"], config["model_flag"], \
        Path(config["data_dir"]), Path(config["results"])
    if ctx.is_main:
        log(f"worker 0 of {ctx.world_size}: model {model_path}: {precision.describe()}; "
            f"{'full fine-tuning' if args.full_ft else 'LoRA'}")

    tokenizer = load_tokenizer(model_path, True, padding_side="right", flag=flag)
    train_ds, eval_ds = load_and_prepare_datasets(args.hfdc, data_dir, tokenizer, args.max_seq_length, ctx.rank,
                                                  SFTDataset, args.max_eval_samples)
    if len(train_ds) == 0:
        raise ScriptError(f"{train_ds.path}: no training rows")
    if ctx.is_main:
        log(f"data {data_dir}: {len(train_ds)} training rows, {len(eval_ds)} validation rows used for evaluation")

    model = load_causal_lm(model_path, flag, dtype=precision.dtype, attn_implementation=precision.attn_implementation,
                           trust_remote_code=True, use_cache=False)
    if not args.full_ft:
        if precision.bf16:  # as the reference's prepare_model_for_kbit_training: fp32 weights, bf16 autocast
            model = model.to(torch.float32)
        model = apply_lora(model, args)
    if ctx.is_main:
        log(count_parameters(model))

    evaluate = len(eval_ds) > 0
    if not evaluate and ctx.is_main:
        log("note: the validation split is empty: no evaluation, no early stopping; saving every --save_steps")
    gpu = precision.device == "cuda"
    targs = training_arguments(
        output_dir=str(results),
        logging_dir=args.logging_dir or str(results / "logs"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate,
        weight_decay=args.weight_decay,
        warmup_ratio=args.warmup_ratio,
        lr_scheduler_type=args.lr_scheduler_type,
        max_grad_norm=args.max_grad_norm,
        logging_steps=args.logging_steps,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=args.eval_steps,
        save_strategy="no" if evaluate else "steps",
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        metric_for_best_model="eval_loss" if evaluate else None,
        greater_is_better=False,
        load_best_model_at_end=False,
        bf16=precision.bf16,
        fp16=precision.fp16,
        use_cpu=not gpu,
        dataloader_num_workers=args.dataloader_num_workers,
        remove_unused_columns=args.remove_unused_columns,
        report_to=report_to(args.use_wandb),
        seed=args.seed,
        optim="adamw_torch_fused" if gpu else "adamw_torch",
        ddp_backend=config["_backend"],
        ddp_find_unused_parameters=False,
        ddp_timeout=7200,
        save_on_each_node=False,
        gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": False},
        use_liger_kernel=args.use_liger_kernel,
        **({"fsdp": ["full_shard", "auto_wrap"], "fsdp_config": dict(FSDP_CONFIG)} if gpu else {}),
    )
    callbacks: list[Any] = [MetricsFileCallback(), RayCheckpointReportCallback()]
    if evaluate:
        callbacks += [SaveOnBestMetricCallback(),
                      EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience,
                                            early_stopping_threshold=args.early_stopping_threshold)]
    trainer = script_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds if evaluate else None,
        data_collator=make_collator(tokenizer), processing_class=tokenizer, callbacks=callbacks,
    )
    result = trainer.train()
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
    if not args.full_ft and not args.lora_target_modules:
        raise ScriptError("--lora_target_modules: empty list")
    model_path, flag, data_dir, results = resolve_paths(args)
    check_dataset_source(args.hfdc, data_dir)
    name = run_name(args.hf_model_id)
    from mlrecipe_scripts.ray_train import ray_launch

    started = ray_launch.init_ray()
    try:
        plan = ray_launch.plan_workers(args.ray_num_workers, args.ray_cpus_per_worker, started_here=started)
        log(f"Ray Train SFT ({'full fine-tuning' if args.full_ft else 'LoRA'}) of {model_path}: {plan.describe()}; "
            f"data {data_dir}; Ray run {results / name}")
        results.mkdir(parents=True, exist_ok=True)
        result = ray_launch.fit(WORKER_MODULE, args_to_dict(args), plan, name, results, extra={
            "model_path": model_path, "model_flag": flag, "data_dir": str(data_dir), "results": str(results)})
    finally:
        ray_launch.shutdown_ray()
    log_done(result, results)
    return 0


def log_done(result: Any, results: Path) -> None:
    """One summary line: steps, train loss (from ``train_results.json``) and the newest Ray checkpoint."""
    import json

    checkpoint = getattr(getattr(result, "checkpoint", None), "path", None)
    summary: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        summary = json.loads((results / "train_results.json").read_text())
    loss = summary.get("train_loss")
    log(f"done: {(result.metrics or {}).get('step', '?')} steps"
        + (f", train loss {loss:.4f}" if isinstance(loss, int | float) else "")
        + f"; newest checkpoint {checkpoint or 'none (no checkpoint was reported)'}")


if __name__ == "__main__":
    run_main(main)
