"""LoRA (or ``--full_ft``) supervised fine-tuning of a causal LM with PyTorch Lightning and PEFT.

Launch it as the reference recipe does, ``python fine_tune.py --num_nodes=N --gpus_per_node=G ...`` (Lightning
starts the G local processes itself and reads ``MASTER_ADDR`` / ``MASTER_PORT`` / ``NODE_RANK``), or under
``torchrun`` (then the processes per node and the node count come from torchrun's environment).

The accelerator follows the device: on CUDA, FSDP (FULL_SHARD, bf16 mixed precision, auto-wrap and activation
checkpointing on the model's own decoder-layer class, fused AdamW, flash_attention_2 when flash-attn is
installed, else sdpa); on CPU, DDP over gloo in fp32 with sdpa attention. Flags are the fields of :class:`Config`
(family D1: real defaults; a boolean flag flips its default; ``--lora_target_modules`` is a comma list; any
``--hfdc_*`` flag rebuilds the dataset config, then ``--hfdc_dataset_name`` is required).

The tokenizer comes from ``--hf_model_id`` when it is available without a download (a local directory, the
Hugging Face cache, or downloads allowed with ``HF_HUB_OFFLINE=0``), else from ``--model_path``.

Writes ``<results_dir>/checkpoints/model-peft-lora-epoch=EE-step=S.ckpt`` (``model-ft-...`` with ``--full_ft``;
the best one by ``val_loss``, plus a ``last.ckpt`` link; full Lightning checkpoints whose ``state_dict`` keys
start with ``model.``) and ``<results_dir>/tb_logs/peft_hf/version_N/``; default results_dir
``$HOME/results/<hf_model_id>``. Data: ``--data_dir`` (default ``$HOME/datasets/<name>/<config>/train=90%-...``)
is prepared by global rank 0 unless it already holds ``.data_ready``.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from mlrecipe_scripts.lightning_core.sft_data import fine_tune_parser, fine_tune_values
from mlrecipe_scripts.pytorch_lightning.ptl_common import (
    DEFAULT_LORA_TARGETS,
    Device,
    Launch,
    ScriptError,
    check_model_source,
    comma_list,
    detect_launch,
    load_tokenizer,
    local_only,
    log,
    offline_defaults,
    quiet_unless_rank_zero,
    report_progress,
    results_dir,
    run_main,
    select_device,
    short_error,
)
from mlrecipe_scripts.pytorch_lightning.ptl_dataset import (
    HFDatasetConfig,
    default_data_dir,
    poll_seconds,
    sft_default_config,
)

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig


@dataclass
class Config:
    """The flags of this script, in the reference's order (``hf_dataset_config`` becomes ``--hfdc_<field>``)."""

    model_path: str | None = None
    hf_model_id: str = "Qwen/Qwen3-8B"
    data_dir: str | None = None
    results_dir: str | None = None
    num_nodes: int = 1
    gpus_per_node: int = 8
    max_steps: int = 10000
    val_check_interval: int = 400
    log_every_n_steps: int = 10
    micro_batch_size: int = 2
    accumulate_grad_batches: int = 4
    limit_val_batches: int = 40
    early_stopping_patience: int = 3
    early_stopping_threshold: float = 0.001
    warmup_steps: int = 100
    weight_decay: float = 0.01
    max_learning_rate: float = 1e-05
    min_learning_rate: float = 1e-07
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: list[str] = field(default_factory=lambda: comma_list(DEFAULT_LORA_TARGETS))
    full_ft: bool = False
    hf_dataset_config: HFDatasetConfig = field(default_factory=sft_default_config)
    max_seq_length: int = 2048
    cpu_offload: bool = False
    use_wandb: bool = False
    seed: int = 42


NESTED = "hf_dataset_config"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (family D1)."""
    return fine_tune_parser(__doc__.split("\n")[0], Config, NESTED, HFDatasetConfig)


def parse_args(argv: list[str] | None = None) -> Config:
    """Parse the command line (strict: an unknown flag exits with status 2) and check the numbers."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    values = fine_tune_values(ns, parser, NESTED, HFDatasetConfig)
    values["lora_target_modules"] = comma_list(values["lora_target_modules"])
    config = Config(**values)
    positive = ("num_nodes", "gpus_per_node", "max_steps", "val_check_interval", "log_every_n_steps",
                "micro_batch_size", "accumulate_grad_batches", "max_seq_length", "early_stopping_patience")
    for name in positive:
        if getattr(config, name) < 1:
            parser.error(f"--{name}={getattr(config, name)}: must be at least 1")
    if config.limit_val_batches < 1:
        parser.error(f"--limit_val_batches={config.limit_val_batches}: must be at least 1 (validation picks the "
                     "checkpoint)")
    if not config.full_ft and not config.lora_target_modules:
        parser.error("--lora_target_modules: empty list (or pass --full_ft)")
    batches = config.max_steps * config.accumulate_grad_batches
    if config.val_check_interval > batches:
        parser.error(f"--val_check_interval={config.val_check_interval}: larger than the training batches per process "
                     f"(--max_steps={config.max_steps} x --accumulate_grad_batches={config.accumulate_grad_batches} "
                     f"= {batches}); validation would never run and no checkpoint would be written")
    return config


# --------------------------------------------------------------------------------------------------------------
# topology, tokenizer, data


def available_cpus() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def topology(config: Config, launch: Launch, device: Device) -> tuple[int, int]:
    """(processes per node, nodes) for the Trainer."""
    if launch.torchrun:
        local = int(os.environ["LOCAL_WORLD_SIZE"])
        devices, nodes = local, max(1, int(os.environ["WORLD_SIZE"]) // max(1, local))
        if (devices, nodes) != (config.gpus_per_node, config.num_nodes):
            log(f"note: launched by torchrun with {devices} process(es) per node on {nodes} node(s); "
                f"--gpus_per_node={config.gpus_per_node} / --num_nodes={config.num_nodes} are not used")
        return devices, nodes
    devices = config.gpus_per_node
    if device.kind == "cuda":
        import torch

        visible = torch.cuda.device_count()
        if devices > visible:
            raise ScriptError(f"--gpus_per_node={devices}: only {visible} GPU(s) are visible here")
    else:
        cpus = available_cpus()
        if devices > cpus:
            log(f"note: no GPU: --gpus_per_node={devices} is taken as the number of CPU processes, capped at "
                f"the {cpus} CPU(s) here")
            devices = cpus
    return devices, config.num_nodes


def tokenizer_source(config: Config, model_path: str) -> tuple[str, str]:
    """(where the tokenizer is loaded from, why): ``--hf_model_id`` as in the reference when that needs no
    download, else ``--model_path``."""
    hf_id = config.hf_model_id
    local = Path(hf_id).expanduser()
    if local.is_dir():
        if any((local / name).is_file() for name in ("tokenizer_config.json", "tokenizer.json")):
            return str(local), "--hf_model_id"
    elif not local_only():
        return hf_id, "--hf_model_id"
    elif hf_id.count("/") == 1 and not hf_id.startswith(("/", ".", "~")):
        from mlrecipe_scripts.pytorch_lightning.ptl_common import in_hf_cache

        if in_hf_cache(hf_id, "tokenizer_config.json"):
            return hf_id, "--hf_model_id"
    if model_path != hf_id:
        log(f"note: tokenizer from --model_path={model_path} (--hf_model_id={hf_id} is not available without a "
            "download)")
    return model_path, "--model_path"


def dataloader_workers(devices: int) -> int:
    """DataLoader workers per process: the reference's 8, fewer where CPUs are scarce (0 on a 2-core box)."""
    return max(0, min(8, available_cpus() // max(1, devices) - 1))


# --------------------------------------------------------------------------------------------------------------
# Lightning pieces (built on first use, so that --help and argument errors do not import torch)


def decoder_layer_classes(model: Any) -> set[type]:
    """The model's transformer-block classes (from ``_no_split_modules``; else classes named ``*DecoderLayer``)."""
    names: set[str] = set()
    for module in model.modules():
        names |= set(getattr(module, "_no_split_modules", None) or [])
    classes = {type(m) for m in model.modules() if type(m).__name__ in names}
    if not classes:
        classes = {type(m) for m in model.modules() if type(m).__name__.endswith(("DecoderLayer", "Block"))}
    return classes


def lightning_classes() -> dict[str, type]:
    """``HFCausalLMModule`` and ``MetricsFileLogger``."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.utilities import rank_zero_only

    class HFCausalLMModule(pl.LightningModule):
        """A causal LM (with a LoRA adapter unless ``enable_lora`` is False) trained on the SFT batches."""

        def __init__(self, model_name: str, lora_config: dict, max_learning_rate: float, min_learning_rate: float,
                     warmup_steps: int, weight_decay: float, max_steps: int, trust_remote_code: bool = True,
                     dtype: str = "bfloat16", enable_lora: bool = True, activation_checkpointing: bool = True,
                     attn_implementation: str = "sdpa", fused_optimizer: bool = False, max_grad_norm: float = 1.0,
                     hf_model_id: str | None = None, model_flag: str = "--model_path"):
            super().__init__()
            self.save_hyperparameters()
            from mlrecipe_scripts.pytorch_lightning.ptl_common import load_causal_lm

            torch_dtype = getattr(torch, dtype)
            self.model = load_causal_lm(model_name, model_flag, dtype=torch_dtype,
                                        attn_implementation=attn_implementation)
            self.model.config.use_cache = False
            self.model.train()  # from_pretrained returns it in eval mode
            if activation_checkpointing:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if enable_lora:
                from peft import LoraConfig, TaskType, get_peft_model

                names = [name for name, _ in self.model.named_modules()]
                absent = [t for t in lora_config["target_modules"]
                          if not any(n == t or n.endswith(f".{t}") for n in names)]
                if absent:  # peft only complains when none of them matches
                    raise ScriptError(f"--lora_target_modules={','.join(lora_config['target_modules'])}: the model "
                                      f"at {model_flag}={model_name} has no module named {', '.join(absent)}")

                peft_config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=lora_config["rank"],
                                         lora_alpha=lora_config["alpha"], lora_dropout=lora_config["dropout"],
                                         target_modules=list(lora_config["target_modules"]), bias="none",
                                         init_lora_weights=True)
                try:
                    self.model = get_peft_model(self.model, peft_config)
                except ValueError as exc:
                    raise ScriptError(f"--lora_target_modules={','.join(lora_config['target_modules'])}: "
                                      f"{short_error(exc)}") from exc
                self.model = self.model.to(dtype=torch_dtype)
            total = sum(p.numel() for p in self.model.parameters())
            trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
            self.parameter_summary = f"trainable {trainable:,} / total {total:,} " \
                                     f"({100 * trainable / max(total, 1):.2f}%)"

        def forward(self, input_ids: Any, labels: Any, attention_mask: Any = None) -> Any:
            return self.model(input_ids=input_ids, labels=labels, attention_mask=attention_mask, use_cache=False)

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
            loss = self(batch["input_ids"], batch["labels"], batch.get("attention_mask")).loss
            self.log("train_loss", loss, prog_bar=True, sync_dist=True, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
            loss = self(batch["input_ids"], batch["labels"], batch.get("attention_mask")).loss
            if not torch.isfinite(loss):
                log(f"note: non-finite validation loss in batch {batch_idx} "
                    f"({int((batch['labels'] != -100).sum())} target tokens); skipped")
                return None
            self.log("val_loss", loss, prog_bar=True, sync_dist=True, on_step=False, on_epoch=True)
            return loss

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            """Clip the gradient norm at ``max_grad_norm`` (FSDP: over all shards)."""
            from torch.distributed.fsdp import FullyShardedDataParallel

            hparams: Any = self.hparams  # an AttributeDict of __init__'s arguments (typed as a MutableMapping)
            wrapped = self.trainer.strategy.model
            if isinstance(wrapped, FullyShardedDataParallel):
                wrapped.clip_grad_norm_(hparams.max_grad_norm)
                return
            params = [p for p in self.model.parameters() if p.requires_grad and p.grad is not None]
            if params:
                torch.nn.utils.clip_grad_norm_(params, max_norm=hparams.max_grad_norm, error_if_nonfinite=True)

        def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
            """AdamW (betas 0.9/0.95; no weight decay on bias / norm) and a cosine schedule down to the min LR."""
            from transformers import get_cosine_with_min_lr_schedule_with_warmup

            hparams: Any = self.hparams  # an AttributeDict of __init__'s arguments (typed as a MutableMapping)
            decay: list[torch.nn.Parameter] = []
            no_decay: list[torch.nn.Parameter] = []
            for name, param in self.model.named_parameters():
                if param.requires_grad:
                    (no_decay if "bias" in name or "norm" in name or "ln" in name else decay).append(param)
            groups = [{"params": decay, "weight_decay": hparams.weight_decay},
                      {"params": no_decay, "weight_decay": 0.0}]
            optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=hparams.max_learning_rate,
                                          betas=(0.9, 0.95), eps=1e-8, fused=hparams.fused_optimizer or None)
            scheduler = get_cosine_with_min_lr_schedule_with_warmup(
                optimizer, num_warmup_steps=hparams.warmup_steps, num_training_steps=hparams.max_steps,
                min_lr=hparams.min_learning_rate)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step",
                                                             "frequency": 1}}

    class MetricsFileLogger(Logger):
        """Global rank 0: one console line per logging event, and ``$MLRECIPE_METRICS_FILE`` lines when it is set."""

        def __init__(self, total_steps: int):
            super().__init__()
            self.total_steps = total_steps

        @property
        def name(self) -> str:
            return "mlrecipe"

        @property
        def version(self) -> int:
            return 0

        @rank_zero_only
        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            return None

        @rank_zero_only
        def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
            trainer = getattr(self, "trainer", None)
            step = trainer.global_step if trainer is not None else step  # optimizer steps done
            shown = {k: float(v) for k, v in metrics.items() if k != "epoch"}
            if shown:
                log(f"step {step}/{self.total_steps}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(shown.items())))
            report_progress(step, self.total_steps, **metrics)

    return {"HFCausalLMModule": HFCausalLMModule, "MetricsFileLogger": MetricsFileLogger}


def configure_strategy(device: Device, devices: int, nodes: int, model: Any, cpu_offload: bool) -> Any:
    """CUDA: FSDP as in the reference (wrap class from the model); CPU: DDP over gloo (or one process)."""
    if device.kind == "cuda":
        from functools import partial

        import torch
        from lightning.pytorch.strategies import FSDPStrategy
        from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        layers = decoder_layer_classes(model)
        log("FSDP auto-wrap on " + (", ".join(sorted(c.__name__ for c in layers)) or "the whole model (no decoder "
                                                                                        "layer class found)"))
        mixed = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16,
                               cast_forward_inputs=True, cast_root_forward_inputs=True) if device.bf16 else None
        return FSDPStrategy(
            auto_wrap_policy=partial(transformer_auto_wrap_policy, transformer_layer_cls=layers) if layers else None,
            sharding_strategy=ShardingStrategy.FULL_SHARD, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            mixed_precision=mixed, cpu_offload=CPUOffload(offload_params=True) if cpu_offload else None,
            sync_module_states=True, forward_prefetch=False, limit_all_gathers=True, use_orig_params=True,
            state_dict_type="full")
    if cpu_offload:
        log("note: --cpu_offload is an FSDP (GPU) option; ignored on CPU")
    if devices * nodes == 1:
        return "auto"
    from lightning.pytorch.strategies import DDPStrategy

    return DDPStrategy(process_group_backend="gloo", find_unused_parameters=False)


def configure_loggers(config: Config, results: Path, classes: dict[str, type]) -> list[Any]:
    """TensorBoard under ``<results>/tb_logs/peft_hf`` (CSV there if TensorBoard is missing), wandb with
    ``--use_wandb`` when installed, and the progress logger."""
    import importlib.util

    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    loggers: list[Any] = []
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        loggers.append(TensorBoardLogger(save_dir=str(results / "tb_logs"), name="peft_hf"))
    else:
        log("note: tensorboard is not installed; CSV logs under tb_logs/peft_hf instead")
        loggers.append(CSVLogger(save_dir=str(results / "tb_logs"), name="peft_hf"))
    if config.use_wandb:
        if importlib.util.find_spec("wandb"):
            from lightning.pytorch.loggers import WandbLogger

            loggers.append(WandbLogger(project="peft_hf", save_dir=str(results / "wandb_logs"), log_model=False))
        else:
            log("note: --use_wandb given but wandb is not installed; TensorBoard only")
    loggers.append(classes["MetricsFileLogger"](config.max_steps))
    return loggers


def configure_callbacks(config: Config, results: Path) -> list[Any]:
    """Early stopping and the top-1 checkpoint on ``val_loss`` (plus a ``last.ckpt`` link)."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    filename = "model-ft-{epoch:02d}-{step}" if config.full_ft else "model-peft-lora-{epoch:02d}-{step}"
    return [
        EarlyStopping(monitor="val_loss", min_delta=config.early_stopping_threshold,
                      patience=config.early_stopping_patience, verbose=True, mode="min", strict=True,
                      check_finite=True),
        ModelCheckpoint(monitor="val_loss", mode="min", save_last="link", save_top_k=1,
                        dirpath=str(results / "checkpoints"), filename=filename, save_weights_only=False),
    ]


def cluster_plugins(launch: Launch) -> list[Any]:
    """Lightning's cluster environment for this launch. When Lightning starts the node's processes itself
    (``python fine_tune.py``, the reference recipe's launch), ``LightningEnvironment``: the processes meet through
    ``MASTER_ADDR`` / ``MASTER_PORT`` / ``NODE_RANK`` (which the recipe exports from ``PET_*``), and a scheduler's own
    variables are not taken for the process layout (under a Slurm job step of one task per node, Lightning would
    otherwise pick its Slurm environment and refuse ``devices`` > 1). Under torchrun Lightning's own choice stays."""
    if launch.torchrun:
        return []
    from lightning.pytorch.plugins.environments import LightningEnvironment

    return [LightningEnvironment()]


def stop_local_processes(trainer: Any) -> None:
    """After a failure in the launching process, stop the local processes Lightning started (they would otherwise
    wait in a collective until the timeout). Nothing to do under torchrun, which stops the other ranks itself."""
    import signal

    launcher: Any = getattr(trainer.strategy, "launcher", None)
    if getattr(launcher, "procs", None) and hasattr(launcher, "kill"):
        launcher.kill(getattr(signal, "SIGKILL", signal.SIGTERM))


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Prepare the data, fine-tune, checkpoint; returns the exit status."""
    config = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if config.model_path else "--hf_model_id"
    model_path = check_model_source(config.model_path or config.hf_model_id, flag)
    dataset = config.hf_dataset_config
    data_dir = Path(config.data_dir).expanduser() if config.data_dir else default_data_dir(dataset)
    results = Path(config.results_dir).expanduser() if config.results_dir else results_dir(config.hf_model_id)
    launch = detect_launch()
    device = select_device()
    quiet_unless_rank_zero(launch.global_rank(1))  # zero exactly on node 0, local rank 0, whatever the topology
    devices, nodes = topology(config, launch, device)
    rank = launch.global_rank(devices)

    from mlrecipe_scripts.pytorch_lightning.ptl_dataset import GeneralizedHFDataModule, prepare_dataset_files

    prepare_dataset_files(dataset, data_dir, rank == 0, poll_seconds())
    tok_path, tok_flag = tokenizer_source(config, model_path)
    workers = dataloader_workers(devices)
    data = GeneralizedHFDataModule(config=dataset, dataset_root=data_dir, tokenizer_name=tok_path,
                                   max_seq_length=config.max_seq_length, micro_batch_size=config.micro_batch_size,
                                   num_workers=workers, pin_memory=device.kind == "cuda", persistent_workers=False)
    data.tokenizer = load_tokenizer(tok_path, tok_flag)
    data.setup("fit")  # fails here, before the model is loaded, when the data is unusable

    import lightning.pytorch as pl

    if workers == 0:
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*is smaller than the logging interval.*")
    total = devices * nodes
    log("=" * 80)
    log(f"Lightning SFT of {config.hf_model_id} ({model_path}), {'full fine-tuning' if config.full_ft else 'LoRA'}")
    log(f"{device.describe()}; {nodes} node(s) x {devices} process(es); "
        f"{'torchrun' if launch.torchrun else 'Lightning-launched processes'}")
    log(f"global batch {config.micro_batch_size * total * config.accumulate_grad_batches} "
        f"(micro {config.micro_batch_size} x {total} x accumulate {config.accumulate_grad_batches}); "
        f"max_steps {config.max_steps}; data {data_dir}; results {results}")
    log("=" * 80)
    pl.seed_everything(config.seed, workers=True, verbose=False)
    classes = lightning_classes()
    module = classes["HFCausalLMModule"](
        model_name=model_path,
        lora_config={"rank": config.lora_rank, "alpha": config.lora_alpha, "dropout": config.lora_dropout,
                     "target_modules": list(config.lora_target_modules)},
        max_learning_rate=config.max_learning_rate, min_learning_rate=config.min_learning_rate,
        warmup_steps=config.warmup_steps, weight_decay=config.weight_decay, max_steps=config.max_steps,
        dtype=str(device.dtype).replace("torch.", ""), enable_lora=not config.full_ft,
        activation_checkpointing=device.kind == "cuda", attn_implementation=device.attn_implementation,
        fused_optimizer=device.kind == "cuda", hf_model_id=config.hf_model_id, model_flag=flag)
    log(f"model: {module.parameter_summary}; attention {module.model.config._attn_implementation}")
    precision: Literal["32-true", "16-mixed"] = "32-true" if device.kind == "cpu" or device.bf16 else "16-mixed"
    trainer = pl.Trainer(
        devices=devices, num_nodes=nodes, accelerator="gpu" if device.kind == "cuda" else "cpu",
        strategy=configure_strategy(device, devices, nodes, module.model, config.cpu_offload), precision=precision,
        max_steps=config.max_steps, val_check_interval=config.val_check_interval, check_val_every_n_epoch=None,
        log_every_n_steps=config.log_every_n_steps, limit_val_batches=config.limit_val_batches,
        accumulate_grad_batches=config.accumulate_grad_batches, gradient_clip_val=None,
        callbacks=configure_callbacks(config, results), logger=configure_loggers(config, results, classes),
        enable_checkpointing=True, enable_progress_bar=sys.stderr.isatty(), enable_model_summary=True,
        deterministic=False, plugins=cluster_plugins(launch))
    for logger in trainer.loggers:
        if isinstance(logger, classes["MetricsFileLogger"]):
            logger.trainer = trainer  # type: ignore[attr-defined]  # read back by MetricsFileLogger.log_metrics
    try:
        trainer.fit(module, datamodule=data)
    except BaseException:
        stop_local_processes(trainer)
        raise
    if trainer.is_global_zero:
        checkpoint = cast("ModelCheckpoint | None", trainer.checkpoint_callback)  # configure_callbacks' ModelCheckpoint
        best = checkpoint.best_model_path if checkpoint else ""
        score = checkpoint.best_model_score if checkpoint else None
        if not best:
            raise ScriptError("training ended without a checkpoint (no validation ran)")
        log(f"done: {trainer.global_step} steps; best checkpoint {best} (val_loss "
            f"{float(score) if score is not None else float('nan'):.4f}); TensorBoard logs in {results / 'tb_logs'}")
    return 0


if __name__ == "__main__":
    run_main(main)
