"""The Ray Train side of the vision-language trainers (``ray_train_vlm.py``, ``cpt_ray_train_vlm.py``).

The flags, adapters, datasets and data preparation are the accelerate VLM scripts' own modules
(``training_common``, ``dataset_module``, ``adapters/``, ``base/``: symlinks into ``scripts/accelerate``, real files
once the chart or the wheel materializes them); Ray itself is ``shared/ray_launch.py`` of this tree, as for the text
trainers. What is here: the Ray flags, the driver (validate, prepare the data, start the worker group, one summary
line) and the worker (load, train with the HF Trainer, report checkpoints to Ray Train).

Differences from the reference, on purpose: the driver prepares ``--data_dir`` from ``--hf_dataset_name`` before the
workers start (it sees the same ``$HOME`` as they do), so bad data fails before Ray does; on GPUs FSDP keeps a full
state dict (not the reference's sharded one), so each Ray checkpoint is a loadable HF directory.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import get_adapter_for_model
from mlrecipe_scripts.hf_trainer.vision_language.training_common import (
    Kind,
    build_datasets,
    describe_parameters,
    load_processor,
    local_files_only,
    prepare_data,
    read_splits,
    resolve_data_dir,
    select_adapter,
)
from mlrecipe_scripts.ray_train.common import (
    ScriptError,
    log,
    offline_defaults,
    report_to,
    results_root,
    run_name,
    short_error,
)
from mlrecipe_scripts.ray_train.common import training_arguments as make_training_arguments

# FSDP on GPUs (the keys lose their "fsdp_" prefix inside transformers); frozen parameters need use_orig_params
GPU_FSDP = {"fsdp": ["full_shard", "auto_wrap"],
            "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD", "fsdp_state_dict_type": "FULL_STATE_DICT",
                            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_use_orig_params": True}}


@dataclass(frozen=True)
class RayVLMSpec:
    """What differs between the SFT and the CPT trainer."""

    kind: Kind
    title: str
    run_suffix: str  # Ray run name: <model_id with / -> -><run_suffix>
    worker_module: str
    dataset_class: str  # in base.base_dataset
    configure: Callable[[Any, Any, argparse.Namespace, str], Any]  # (model, adapter, args, flag) -> model
    schedule: Callable[[argparse.Namespace, bool], tuple[dict[str, Any], list[Any]]]  # (args, evaluate)


def add_ray_flags(parser: argparse.ArgumentParser, paths: Any) -> None:
    """``--results_dir`` (in the "paths" group) and the mlrecipe additions ``--ray_num_workers`` /
    ``--ray_cpus_per_worker``."""
    paths.add_argument("--results_dir", type=str, default="results",
                       help="Ray storage and HF scratch, joined to $HOME (an absolute path is kept; default: "
                            "%(default)s)")
    ray = parser.add_argument_group("Ray Train worker group (mlrecipe additions)")
    ray.add_argument("--ray_num_workers", type=int, default=None,
                     help="number of workers (default: one per GPU; 2 without GPUs)")
    ray.add_argument("--ray_cpus_per_worker", type=int, default=None,
                     help="CPUs per worker (default: min(4, CPUs/GPU); an equal share without GPUs)")


def load_pretrained_vlm(path: str, flag: str, auto_class: str, dtype: Any = "auto",
                        attn_implementation: str | None = "sdpa", trust_remote_code: bool = True,
                        **kwargs: Any) -> Any:
    """``transformers.<auto_class>.from_pretrained`` without downloads (the adapters' ``loader``); a failure is a
    :class:`ScriptError` naming ``flag``."""
    import transformers

    try:
        return getattr(transformers, auto_class).from_pretrained(
            path, dtype=dtype, attn_implementation=attn_implementation, trust_remote_code=trust_remote_code,
            local_files_only=local_files_only(), **kwargs)
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load it as {auto_class} ({short_error(exc)})") from exc


# --------------------------------------------------------------------------------------------------------------
# driver side


def run_driver(args: argparse.Namespace, spec: RayVLMSpec) -> int:
    """Validate, prepare the data, run the workers on Ray; returns the exit status."""
    if args.list_models:
        from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import print_supported_models

        print_supported_models()
        return 0
    offline_defaults()
    adapter, source, flag = select_adapter(args)
    if Path(source).expanduser().is_dir():
        source = str(Path(source).expanduser().resolve())
    data_dir = prepare_data(args, resolve_data_dir(args, spec.kind).absolute())
    train_rows, val_rows = read_splits(data_dir, args.max_eval_samples)
    results = results_root(args.results_dir)
    name = run_name(args.model_id) + spec.run_suffix
    from mlrecipe_scripts.ray_train import ray_launch

    started = ray_launch.init_ray()
    try:
        plan = ray_launch.plan_workers(args.ray_num_workers, args.ray_cpus_per_worker, started_here=started)
        log(f"Ray Train {spec.title} of {source} ({adapter.model_family} adapter): {plan.describe()}; data "
            f"{data_dir} ({len(train_rows)} training, {len(val_rows)} validation rows); Ray run {results / name}")
        results.mkdir(parents=True, exist_ok=True)
        result = ray_launch.fit(spec.worker_module, vars(args), plan, name, results, extra={
            "model_path": source, "model_flag": flag, "data_dir": str(data_dir), "results": str(results)})
    finally:
        ray_launch.shutdown_ray()
    loss = json.loads((results / "train_results.json").read_text()).get("train_loss")  # written by worker 0
    checkpoint = result.checkpoint.path if result.checkpoint else "none (no checkpoint was reported)"
    log(f"done: {(result.metrics or {}).get('step', '?')} steps, train loss {loss:.4f}; newest checkpoint {checkpoint}")
    return 0


# --------------------------------------------------------------------------------------------------------------
# worker side


def run_worker(config: dict[str, Any], spec: RayVLMSpec) -> None:
    """One Ray Train worker: processor, datasets, model, HF Trainer reporting its checkpoints to Ray Train."""
    import ray.train
    from transformers import set_seed

    from mlrecipe_scripts.hf_trainer.vision_language.base import base_dataset
    from mlrecipe_scripts.ray_train.ray_callbacks import (
        MetricsFileCallback,
        RayCheckpointReportCallback,
        script_trainer_class,
    )
    from mlrecipe_scripts.ray_train.ray_launch import worker_setup

    args = argparse.Namespace(**config["args"])
    ctx = worker_setup(config)
    precision = ctx.precision
    set_seed(args.seed)
    source, flag = config["model_path"], config["model_flag"]
    data_dir, results = Path(config["data_dir"]), Path(config["results"])
    adapter = get_adapter_for_model(source)
    if ctx.is_main:
        log(f"worker 0 of {ctx.world_size}: model {source} ({adapter.model_family} adapter): {precision.describe()}; "
            f"vision encoder {'frozen' if args.freeze_vision_encoder else 'trained'}")
    processor, tokenizer = load_processor(adapter, source, flag)
    train_ds, eval_ds = build_datasets(getattr(base_dataset, spec.dataset_class), data_dir,
                                       read_splits(data_dir, args.max_eval_samples), adapter, processor, tokenizer,
                                       args.max_seq_length)
    model = adapter.load_model(source, flag=flag, dtype=precision.dtype, loader=load_pretrained_vlm,
                               attn_implementation=precision.attn_implementation, use_cache=False)
    if args.freeze_vision_encoder:
        adapter.freeze_vision_encoder(model)
    model = spec.configure(model, adapter, args, flag)
    if ctx.is_main:
        log(describe_parameters(adapter, model))

    evaluate = eval_ds is not None
    gpu = precision.device == "cuda"
    schedule, callbacks = spec.schedule(args, evaluate)
    targs = make_training_arguments(
        output_dir=str(results), logging_dir=str(results / "logs"), **schedule,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, learning_rate=args.learning_rate,
        weight_decay=args.weight_decay, warmup_steps=args.warmup_steps, max_grad_norm=args.max_grad_norm,
        lr_scheduler_type="cosine", logging_steps=args.logging_steps, eval_steps=args.eval_steps,
        eval_strategy="steps" if evaluate else "no", bf16=precision.bf16, fp16=precision.fp16, use_cpu=not gpu,
        gradient_checkpointing=gpu, gradient_checkpointing_kwargs={"use_reentrant": False},
        report_to=report_to(args.use_wandb), seed=args.seed, dataloader_num_workers=args.num_workers,
        remove_unused_columns=False, optim="adamw_torch_fused" if gpu else "adamw_torch",
        ddp_backend=config["_backend"], ddp_timeout=7200, save_on_each_node=False,
        # text-only rows leave a trainable vision tower without gradients on that step
        ddp_find_unused_parameters=bool(adapter.vision_is_trainable(model) and train_ds.text_only_rows),
        **(GPU_FSDP if gpu else {}),
    )
    trainer = script_trainer_class()(
        model=model, args=targs, train_dataset=train_ds, eval_dataset=eval_ds,
        data_collator=base_dataset.VLMCollator(adapter, tokenizer.pad_token_id), processing_class=processor,
        callbacks=[MetricsFileCallback(), RayCheckpointReportCallback(), *callbacks],
    )
    result = trainer.train(resume_from_checkpoint=vars(args).get("resume_from_checkpoint"))
    metrics = {k: v for k, v in result.metrics.items() if isinstance(v, int | float)}
    if trainer.is_world_process_zero():
        trainer.save_metrics("train", metrics)
    ray.train.report({**metrics, "step": int(result.global_step)})
