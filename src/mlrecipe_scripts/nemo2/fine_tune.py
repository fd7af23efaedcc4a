"""LoRA (or ``--full_ft``) fine-tuning of a Hugging Face model with a NeMo 2 recipe, launched by nemo_run.

Run it as the reference recipe does, once per node: ``python fine_tune.py --node_rank=R --num_nodes=N
--gpus_per_node=G ...`` (multi-node: ``MASTER_ADDR`` / ``MASTER_PORT`` in the environment, or ``PET_MASTER_*``).
Steps:

1. node 0 prepares ``--data_dir`` (``training/validation/test.jsonl`` + ``.data_ready``) unless the marker is there,
   and imports the Hugging Face checkpoint ``hf://<model_path>`` into ``--nemo_ckpt_dir/{context,weights}`` once
   (``llm.import_ckpt``, in a child process, written atomically); other nodes wait for both;
2. ``nemo.collections.llm.recipes.<recipe_cls_name>.finetune_recipe(...)`` (``peft_scheme`` None with
   ``--full_ft``) gets the flags: the data (``nemo2_dataset.GeneralizedHFDataModule``), the parallelism, the
   trainer limits, a ``NeMoLogger`` (``<output_dir>/nemo_logs/<timestamp>/checkpoints/nemo_logs--...``; top-1 by
   ``val_loss``, ``-last`` link, weights only; TensorBoard ``tb_logs/peft_megatron``), early stopping on
   ``val_loss`` and the optional monitoring callbacks;
3. nemo_run's ``LocalExecutor`` (torchrun, G processes per node) runs it inside an ``Experiment`` under
   ``--output_dir``. A job that does not end SUCCEEDED makes this script exit non-zero (the reference printed the
   error and exited 0).

Batch sizes: Megatron accumulates gradients through the global batch, ``micro_batch_size x
accumulate_grad_batches x data-parallel size`` with data-parallel size = GPUs / (TP x PP x CP); Lightning's own
``accumulate_grad_batches`` stays 1, so ``--max_steps`` and ``--val_check_interval`` count optimizer steps.

Flags are the fields of :class:`Config` (family D1: real defaults; a boolean flag flips its default; any
``--hfdc_*`` flag rebuilds the dataset config, then ``--hfdc_dataset_name`` is required). Nothing is downloaded
unless ``HF_HUB_OFFLINE=0``. ``MLRECIPE_NEMO2_DRY_RUN=1`` builds and prints the recipe and launches nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe_scripts.lightning_core.sft_data import fine_tune_parser, fine_tune_values
from mlrecipe_scripts.nemo2.nemo2_common import (
    METRICS_VAR,
    ScriptError,
    check_model_source,
    data_parallel_size,
    find_checkpoint,
    log,
    model_id_parts,
    offline_defaults,
    poll_seconds,
    require_cuda,
    require_nemo,
    run_main,
    short_error,
    wait_for,
)
from mlrecipe_scripts.nemo2.nemo2_dataset import (
    READY_MARKER,
    HFDatasetConfig,
    default_data_dir,
    prepare_dataset_files,
    sft_default_config,
)

PEFT_SCHEMES = ("lora", "dora")
DRY_RUN_VAR = "MLRECIPE_NEMO2_DRY_RUN"


@dataclass
class Config:
    """The flags of this script, in the reference's order (``hf_dataset_config`` becomes ``--hfdc_<field>``)."""

    model_path: str | None = None
    hf_model_id: str = "Qwen/Qwen3-8B"
    recipe_cls_name: str = "qwen3_8b"
    data_dir: str | None = None
    output_dir: str | None = None
    nemo_ckpt_dir: str | None = None
    num_nodes: int = 1
    gpus_per_node: int = 8
    node_rank: int = 0
    tensor_parallel_size: int = 8
    pipeline_parallel_size: int = 1
    context_parallel_size: int = 1
    max_steps: int = 10000
    val_check_interval: int = 800
    log_every_n_steps: int = 10
    micro_batch_size: int = 8
    accumulate_grad_batches: int = 8
    limit_val_batches: int = 80
    early_stopping_patience: int = 3
    early_stopping_threshold: float = 0.001
    peft_scheme: str = "lora"
    full_ft: bool = False
    hf_dataset_config: HFDatasetConfig = field(default_factory=sft_default_config)
    max_seq_length: int = 2048
    enable_megatron_progress_bar: bool = False
    enable_nsys_callback: bool = False
    enable_pytorch_profiler: bool = False
    enable_speed_monitor: bool = False
    enable_memory_monitor: bool = False
    enable_runtime_estimator: bool = False
    enable_memory_profile: bool = False
    use_wandb: bool = False

    def resolved(self, home: Path | None = None) -> Config:
        """A copy with the path defaults filled in (model_path, data_dir, output_dir, nemo_ckpt_dir)."""
        home = home or Path.home()
        model_path = self.model_path or self.hf_model_id
        data_dir = self.data_dir or str(default_data_dir(self.hf_dataset_config, home))
        output_dir = self.output_dir or str(home / "outputs" / Path(*model_id_parts(self.hf_model_id)))
        nemo_ckpt_dir = self.nemo_ckpt_dir or str(Path(output_dir) / "imported_hf_ckpt")
        return dataclasses.replace(self, model_path=model_path, data_dir=data_dir, output_dir=output_dir,
                                   nemo_ckpt_dir=nemo_ckpt_dir)


NESTED = "hf_dataset_config"
POSITIVE = ("num_nodes", "gpus_per_node", "tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size",
            "max_steps", "val_check_interval", "log_every_n_steps", "micro_batch_size", "accumulate_grad_batches",
            "limit_val_batches", "early_stopping_patience", "max_seq_length")


@dataclass(frozen=True)
class Layout:
    """GPUs and batch sizes of a run."""

    world_size: int
    model_parallel: int  # TP x PP x CP
    data_parallel: int
    global_batch_size: int


def parallel_layout(num_nodes: int, gpus_per_node: int, tp: int, pp: int, cp: int, micro_batch_size: int,
                    accumulate_grad_batches: int) -> Layout:
    """World size, data-parallel size and global batch (``micro x accumulation x DP``); ValueError if TP x PP x CP
    does not divide the GPUs."""
    dp = data_parallel_size(num_nodes, gpus_per_node, tp, pp, cp)
    return Layout(num_nodes * gpus_per_node, tp * pp * cp, dp, micro_batch_size * accumulate_grad_batches * dp)


def peft_choice(config: Config) -> str | None:
    """The recipe's ``peft_scheme``: None for full fine-tuning (``--full_ft`` or ``--peft_scheme=none``)."""
    if config.full_ft or config.peft_scheme.lower() == "none":
        return None
    return config.peft_scheme.lower()


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (family D1)."""
    return fine_tune_parser(__doc__.split("\n")[0], Config, NESTED, HFDatasetConfig)


def parse_args(argv: list[str] | None = None) -> Config:
    """Parse the command line (strict: an unknown flag exits with status 2) and check the values (status 2)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    values = fine_tune_values(ns, parser, NESTED, HFDatasetConfig)
    config = Config(**values)
    for name in POSITIVE:
        if getattr(config, name) < 1:
            parser.error(f"--{name}={getattr(config, name)}: must be at least 1")
    if not 0 <= config.node_rank < config.num_nodes:
        parser.error(f"--node_rank={config.node_rank}: must be between 0 and --num_nodes - 1 ({config.num_nodes - 1})")
    if config.early_stopping_threshold < 0:
        parser.error(f"--early_stopping_threshold={config.early_stopping_threshold}: must not be negative")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", config.recipe_cls_name):
        parser.error(f"--recipe_cls_name={config.recipe_cls_name}: not a module name of nemo.collections.llm.recipes "
                     "(e.g. qwen3_8b, qwen3_14b, llama3_8b)")
    if not config.full_ft and config.peft_scheme.lower() not in (*PEFT_SCHEMES, "none"):
        parser.error(f"--peft_scheme={config.peft_scheme}: must be one of {', '.join(PEFT_SCHEMES)} (or none; or pass "
                     "--full_ft)")
    if config.enable_nsys_callback and config.enable_pytorch_profiler:
        parser.error("--enable_nsys_callback and --enable_pytorch_profiler cannot be used together")
    if config.val_check_interval > config.max_steps:
        parser.error(f"--val_check_interval={config.val_check_interval}: larger than --max_steps={config.max_steps}; "
                     "validation would never run and no checkpoint would be selected")
    try:
        parallel_layout(config.num_nodes, config.gpus_per_node, config.tensor_parallel_size,
                        config.pipeline_parallel_size, config.context_parallel_size, config.micro_batch_size,
                        config.accumulate_grad_batches)
    except ValueError as exc:
        parser.error(str(exc))
    return config


def layout_of(config: Config) -> Layout:
    """The :class:`Layout` of a parsed config."""
    return parallel_layout(config.num_nodes, config.gpus_per_node, config.tensor_parallel_size,
                           config.pipeline_parallel_size, config.context_parallel_size, config.micro_batch_size,
                           config.accumulate_grad_batches)


# --------------------------------------------------------------------------------------------------------------
# the recipe, as plain data (turned into nemo_run configs once NeMo is imported)


@dataclass
class Spec:
    """A class to instantiate, by import path, with keyword arguments (values may be specs too)."""

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def data_spec(config: Config, layout: Layout) -> Spec:
    """The DataModule: the prepared ``data_dir``, the tokenizer of ``model_path``, micro and global batch."""
    return Spec("mlrecipe_scripts.nemo2.nemo2_dataset.GeneralizedHFDataModule", {
        "config": config.hf_dataset_config.to_dict(),
        "hf_model_id": config.model_path,
        "dataset_root": config.data_dir,
        "seq_length": config.max_seq_length,
        "micro_batch_size": config.micro_batch_size,
        "global_batch_size": layout.global_batch_size,
    })


def logger_spec(config: Config) -> Spec:
    """``NeMoLogger``: ``<output_dir>/nemo_logs/<timestamp>/``, top-1 checkpoint by ``val_loss`` + ``-last`` link."""
    wandb = Spec("lightning.pytorch.loggers.WandbLogger", {"project": "peft_megatron", "save_dir": "wandb_logs",
                                                          "log_model": False}) if config.use_wandb else None
    return Spec("nemo.lightning.NeMoLogger", {
        "name": "nemo_logs",
        "log_dir": config.output_dir,
        "tensorboard": Spec("lightning.pytorch.loggers.TensorBoardLogger",
                            {"save_dir": "tb_logs", "name": "peft_megatron"}),
        "wandb": wandb,
        "ckpt": Spec("nemo.lightning.pytorch.callbacks.ModelCheckpoint", {
            "monitor": "val_loss", "mode": "min", "save_last": "link", "save_top_k": 1, "save_weights_only": True}),
    })


def callback_specs(config: Config, metrics_file: str | None = None) -> list[Spec]:
    """Early stopping on ``val_loss``, the ``--enable_*`` callbacks, and progress lines when ``metrics_file``."""
    nemo_cb = "nemo.lightning.pytorch.callbacks."
    specs = [Spec("lightning.pytorch.callbacks.EarlyStopping", {
        "monitor": "val_loss", "mode": "min", "min_delta": config.early_stopping_threshold,
        "patience": config.early_stopping_patience, "verbose": True, "strict": True, "check_finite": True,
        "check_on_train_epoch_end": False})]
    output = Path(str(config.output_dir))
    if config.enable_megatron_progress_bar:
        specs.append(Spec(nemo_cb + "MegatronProgressBar", {"refresh_rate": config.log_every_n_steps}))
    if config.enable_memory_monitor:
        specs.append(Spec(nemo_cb + "MemoryMonitor"))
    if config.enable_speed_monitor:
        specs.append(Spec(nemo_cb + "SpeedMonitor", {"window_size": 100}))
    if config.enable_memory_profile:
        specs.append(Spec(nemo_cb + "MemoryProfileCallback", {"dir": str(output / "mem_profile"), "ranks": [0]}))
    if config.enable_runtime_estimator:
        specs.append(Spec(nemo_cb + "RuntimeEstimator"))
    if config.enable_pytorch_profiler:
        specs.append(Spec(nemo_cb + "PytorchProfilerCallback",
                          {"start_step": 0, "end_step": 1, "trace_dir": str(output / "trace")}))
    if config.enable_nsys_callback:
        specs.append(Spec(nemo_cb + "NsysCallback",
                          {"start_step": 0, "end_step": 1, "ranks": [0], "gen_shape": True, "nvtx_ranges": False}))
    if metrics_file:
        specs.append(Spec("mlrecipe_scripts.nemo2.nemo2_common.MetricsCallback",
                          {"every_n_steps": config.log_every_n_steps}))
    return specs


def recipe_overrides(config: Config, layout: Layout) -> dict[str, Any]:
    """Dotted attribute paths of the recipe -> values (specs are built into configs when applied)."""
    overrides: dict[str, Any] = {
        "data": data_spec(config, layout),
        "log": logger_spec(config),
        "tokenizer": "data",
        "resume.restore_config.path": config.nemo_ckpt_dir,
        "trainer.num_nodes": config.num_nodes,
        "trainer.devices": config.gpus_per_node,
        "trainer.max_steps": config.max_steps,
        "trainer.val_check_interval": config.val_check_interval,
        "trainer.limit_val_batches": config.limit_val_batches,
        "trainer.log_every_n_steps": config.log_every_n_steps,
        "trainer.num_sanity_val_steps": 1,
        "trainer.accumulate_grad_batches": 1,  # Megatron accumulates through the global batch size
        "trainer.strategy.tensor_model_parallel_size": config.tensor_parallel_size,
        "trainer.strategy.pipeline_model_parallel_size": config.pipeline_parallel_size,
        "trainer.strategy.context_parallel_size": config.context_parallel_size,
    }
    if config.context_parallel_size > 1:  # NeMo requires per-token loss for SFT with context parallelism
        overrides["model.config.calculate_per_token_loss"] = True
    return overrides


def distributed_env(config: Config, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables nemo_run's torchrun needs for a multi-node rendezvous (``MASTER_ADDR``, ``MASTER_PORT``,
    ``NODE_RANK``), taken from the environment (or its ``PET_*`` names); {} for one node."""
    if config.num_nodes == 1:
        return {}
    env: dict[str, str] = {}
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        value = environ.get(name) or environ.get(f"PET_{name}")
        if not value:
            raise ScriptError(f"--num_nodes={config.num_nodes}: a multi-node run needs {name} (or PET_{name}) in the "
                              "environment (torchrun's rendezvous point on node 0)")
        env[name] = value
    node_rank = environ.get("NODE_RANK")
    if node_rank not in (None, "") and node_rank != str(config.node_rank):
        raise ScriptError(f"--node_rank={config.node_rank} but NODE_RANK={node_rank} in the environment")
    env["NODE_RANK"] = str(config.node_rank)
    return env


def imported(nemo_ckpt_dir: Path) -> bool:
    """Whether the HF checkpoint has been imported (``context/`` and ``weights/`` exist)."""
    return (nemo_ckpt_dir / "context").is_dir() and (nemo_ckpt_dir / "weights").is_dir()


# --------------------------------------------------------------------------------------------------------------
# NeMo parts


def import_object(path: str) -> Any:
    """``package.module.Name`` -> the object."""
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def to_run_config(value: Any) -> Any:
    """Specs (also inside lists / dicts) -> ``nemo_run.Config``."""
    import nemo_run as run

    if isinstance(value, Spec):
        return run.Config(import_object(value.target), **{k: to_run_config(v) for k, v in value.kwargs.items()})
    if isinstance(value, list):
        return [to_run_config(v) for v in value]
    return value


def load_recipe_module(name: str) -> Any:
    """``nemo.collections.llm.recipes.<name>``, which must have ``model`` and ``finetune_recipe``."""
    import importlib

    module_name = f"nemo.collections.llm.recipes.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and not module_name.startswith(exc.name):
            raise
        raise ScriptError(f"--recipe_cls_name={name}: NeMo has no recipe module {module_name}") from None
    for attr in ("model", "finetune_recipe"):
        if not callable(getattr(module, attr, None)):
            raise ScriptError(f"--recipe_cls_name={name}: {module_name} has no {attr}()")
    return module


def apply_overrides(recipe: Any, overrides: dict[str, Any]) -> None:
    """Set each dotted attribute path of the (fiddle) recipe config."""
    for path, value in overrides.items():
        *parents, leaf = path.split(".")
        node = recipe
        for part in parents:
            node = getattr(node, part)
        setattr(node, leaf, to_run_config(value))


def build_recipe(config: Config, layout: Layout, recipe_module: Any) -> Any:
    """The recipe's ``finetune_recipe`` with the flags applied (a ``nemo_run.Partial`` of ``llm.finetune``)."""
    recipe = recipe_module.finetune_recipe(dir=config.output_dir, name=config.recipe_cls_name,
                                           num_nodes=config.num_nodes, num_gpus_per_node=config.gpus_per_node,
                                           peft_scheme=peft_choice(config), packed_sequence=False)
    apply_overrides(recipe, recipe_overrides(config, layout))
    callbacks = list(getattr(recipe.trainer, "callbacks", None) or [])
    recipe.trainer.callbacks = callbacks + to_run_config(callback_specs(config, os.environ.get(METRICS_VAR)))
    return recipe


def check_serializable(recipe: Any) -> None:
    """Round-trip the recipe through nemo_run's serializer, as the torchrun workers will receive it."""
    from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

    serializer = ZlibJSONSerializer()
    try:
        serializer.deserialize(serializer.serialize(recipe))
    except Exception as exc:
        raise ScriptError(f"the recipe cannot be serialized for the workers ({short_error(exc)})") from exc


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _import_worker(recipe_name: str, source: str, output: str, port: int) -> None:
    """Child process: ``llm.import_ckpt`` as a lone process (the job's rendezvous variables are replaced)."""
    for name in ("NODE_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID"):
        os.environ.pop(name, None)
    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    import fiddle as fdl
    from nemo.collections import llm

    model = fdl.build(load_recipe_module(recipe_name).model())
    llm.import_ckpt(model=model, source=source, output_path=output, overwrite=False)


def import_hf_checkpoint(config: Config) -> None:
    """Node 0: import ``hf://<model_path>`` into ``--nemo_ckpt_dir`` unless done (atomically, in a child process)."""
    import multiprocessing

    target = Path(str(config.nemo_ckpt_dir))
    if imported(target):
        log(f"HF checkpoint already imported in {target}")
        return
    if target.exists():
        raise ScriptError(f"--nemo_ckpt_dir={target}: exists but has no context/ and weights/ (an interrupted "
                          "import?); remove it or pass another --nemo_ckpt_dir")
    source = f"hf://{config.model_path}"
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"importing {source} into {target} ...")
    process = multiprocessing.get_context("spawn").Process(
        target=_import_worker, args=(config.recipe_cls_name, source, str(tmp), _free_port()))
    process.start()
    process.join()
    try:
        if process.exitcode != 0 or not imported(tmp):
            raise ScriptError(f"importing {source} into {target} failed (exit status {process.exitcode}; see the "
                              "log above)")
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"imported {source} into {target}")


def job_state(job: Any) -> str:
    """A nemo_run job's final state name (``SUCCEEDED``, ``FAILED``, ...)."""
    state = getattr(job, "state", None)
    return str(getattr(state, "name", state))


def launch(recipe: Any, config: Config, env_vars: dict[str, str]) -> None:
    """Run the recipe with nemo_run (torchrun, ``gpus_per_node`` processes per node); ScriptError unless it
    succeeded."""
    import nemo_run as run

    executor = run.LocalExecutor(ntasks_per_node=config.gpus_per_node, nodes=config.num_nodes, launcher="torchrun",
                                 env_vars=env_vars)
    scheme = peft_choice(config)
    title = "full_ft" if scheme is None else f"peft_{scheme}"
    with run.Experiment(title, executor=executor, log_level="INFO", base_dir=str(config.output_dir)) as exp:
        exp.add(recipe, tail_logs=True, name=config.recipe_cls_name)
        exp.run(detach=False)
    states = {str(getattr(job, "id", i)): job_state(job) for i, job in enumerate(exp.jobs)}
    failed = {k: v for k, v in states.items() if v != "SUCCEEDED"}
    if not states or failed:
        detail = ", ".join(f"{k}: {v}" for k, v in failed.items()) or "no job ran"
        raise ScriptError(f"fine-tuning failed ({detail}; see the log above)")


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Prepare, import, build the recipe and run it; returns the exit status."""
    config = parse_args(argv).resolved()
    offline_defaults()
    layout = layout_of(config)
    dry_run = os.environ.get(DRY_RUN_VAR, "") in ("1", "true", "True")
    require_nemo("fine_tune.py", "nemo.collections.llm", "nemo_run")
    flag = "--model_path" if config.model_path != config.hf_model_id else "--hf_model_id"
    check_model_source(str(config.model_path), flag)
    scheme = peft_choice(config)
    log(f"recipe {config.recipe_cls_name} ({'full fine-tuning' if scheme is None else scheme}); "
        f"{config.num_nodes} node(s) x {config.gpus_per_node} GPU(s), TP {config.tensor_parallel_size} PP "
        f"{config.pipeline_parallel_size} CP {config.context_parallel_size}, data-parallel {layout.data_parallel}; "
        f"global batch {layout.global_batch_size} (micro {config.micro_batch_size} x accumulation "
        f"{config.accumulate_grad_batches} x DP {layout.data_parallel})")
    log(f"model {config.model_path}; data {config.data_dir}; outputs {config.output_dir}; "
        f"imported checkpoint {config.nemo_ckpt_dir}")
    recipe = build_recipe(config, layout, load_recipe_module(config.recipe_cls_name))
    check_serializable(recipe)
    if dry_run:
        log(f"{DRY_RUN_VAR}: the recipe (nothing is prepared, imported or launched):")
        log(str(recipe))
        return 0

    require_cuda("fine_tune.py", config.gpus_per_node)
    env = distributed_env(config, os.environ)
    os.environ.update(env)
    data_dir, nemo_ckpt_dir = Path(str(config.data_dir)), Path(str(config.nemo_ckpt_dir))
    if config.node_rank == 0:
        prepare_dataset_files(config.hf_dataset_config, data_dir, is_global_zero=True)
        import_hf_checkpoint(config)
    else:
        log(f"node {config.node_rank}: waiting for node 0 to prepare {data_dir} and import {nemo_ckpt_dir}")
        wait_for([data_dir / READY_MARKER, nemo_ckpt_dir / "context", nemo_ckpt_dir / "weights"],
                 "node 0 (data preparation and checkpoint import)", poll_seconds())
    for sub in (("mem_profile",) if config.enable_memory_profile else ()) + \
            (("trace",) if config.enable_pytorch_profiler else ()):
        Path(str(config.output_dir), sub).mkdir(parents=True, exist_ok=True)
    from mlrecipe_scripts import import_root

    scripts_dir = import_root()
    pythonpath = os.pathsep.join(p for p in (scripts_dir, os.environ.get("PYTHONPATH", "")) if p)
    log(f"starting NeMo recipe {config.recipe_cls_name} fine-tuning ...")
    launch(recipe, config, {**env, "PYTHONPATH": pythonpath})
    if config.node_rank == 0:
        logs = Path(str(config.output_dir)) / "nemo_logs"
        try:
            ckpt = find_checkpoint(str(logs))
        except ScriptError as exc:
            raise ScriptError(f"fine-tuning ended but left no checkpoint under {logs} ({exc})") from exc
        log(f"fine-tuning completed; newest checkpoint {ckpt}")
    else:
        log("fine-tuning completed")
    return 0


if __name__ == "__main__":
    run_main(main)
