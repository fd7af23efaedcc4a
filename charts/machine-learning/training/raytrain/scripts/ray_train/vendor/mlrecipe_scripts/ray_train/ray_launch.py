"""The Ray side of the ray_train trainers: connect to (or start) Ray, size the worker group, run ``TorchTrainer``.

Driver side (the script's ``main``):

* :func:`init_ray`: with ``RAY_ADDRESS`` set (a KubeRay job's driver, mlrecipe's local Ray cluster, or
  ``RAY_ADDRESS=auto`` for a cluster started with ``ray start`` on this machine) it joins that cluster, as the
  reference's ``ray.init()`` does. Without it, it starts a private single-node Ray for this run, with bounded
  resources: ``MLRECIPE_RAY_NUM_CPUS`` (default: all CPUs), ``MLRECIPE_RAY_OBJECT_STORE_BYTES`` (default 128 MiB),
  no dashboard, no usage stats. :func:`shutdown_ray` stops it again (call it in ``finally``).
* :func:`plan_workers`: where the cluster has GPUs (and ``MLRECIPE_FORCE_CPU`` is not set) one GPU worker per GPU,
  ``{CPU: min(4, CPUs per GPU), GPU: 1}`` each, backend ``nccl``, as the reference. Without GPUs the reference would
  ask for 0 workers; here it is 2 CPU workers (1 when the cluster has a single CPU), each with an equal share of the
  CPUs, backend ``gloo``. ``--ray_num_workers`` / ``MLRECIPE_RAY_NUM_WORKERS`` and ``--ray_cpus_per_worker`` /
  ``MLRECIPE_RAY_CPUS_PER_WORKER`` override the choice. Placement ``SPREAD``.
* :func:`fit`: ``TorchTrainer`` with ``RunConfig(name, storage_path, CheckpointConfig(num_to_keep=2),
  FailureConfig(max_failures=2))`` (``MLRECIPE_RAY_MAX_FAILURES`` overrides the 2). A failed run becomes a
  :class:`ScriptError` (one ``error:`` line; the worker traceback is in the log above it).

Worker side: :func:`bootstrap` (the function Ray ships to the workers) puts the scripts directory on ``sys.path``,
restores the driver's ``MLRECIPE_*`` / ``HF_*`` variables and calls ``<script module>.train_worker(config)``; the
worker then calls :func:`worker_setup` for its rank, device and precision.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any

from mlrecipe_scripts.ray_train.common import (
    ScriptError,
    force_cpu,
    log,
    offline_defaults,
    select_precision,
    short_error,
)

DEFAULT_OBJECT_STORE_BYTES = 128 * 1024 * 1024
FORWARDED_PREFIXES = ("MLRECIPE_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "WANDB_", "TENSORBOARD_")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ScriptError(f"{name}={value}: not an integer") from None


def init_ray() -> bool:
    """Connect to the Ray cluster named by ``RAY_ADDRESS``, or start a private local one; True when started here."""
    import ray

    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address and address != "local":
        log(f"joining the Ray cluster at {address}")
        try:
            ray.init(address=address)
        except Exception as exc:
            raise ScriptError(f"RAY_ADDRESS={address}: cannot connect to Ray ({short_error(exc)})") from exc
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")  # else the workers' prints show up twice
    cpus = _env_int("MLRECIPE_RAY_NUM_CPUS") or os.cpu_count() or 1
    store = _env_int("MLRECIPE_RAY_OBJECT_STORE_BYTES") or DEFAULT_OBJECT_STORE_BYTES
    kwargs: dict[str, Any] = {}
    if force_cpu():
        kwargs["num_gpus"] = 0
    try:
        ray.init(address="local", num_cpus=cpus, object_store_memory=store, include_dashboard=False,
                 **kwargs)
    except Exception as exc:
        raise ScriptError(f"cannot start a local Ray ({short_error(exc)})") from exc
    gpus = int(ray.cluster_resources().get("GPU", 0))
    log(f"no RAY_ADDRESS: started a local Ray for this run ({cpus} CPUs, {gpus} GPUs, object store "
        f"{store // (1024 * 1024)} MiB, no dashboard); it stops when the run ends")
    return True


def shutdown_ray() -> None:
    """Disconnect from Ray; a local Ray started by :func:`init_ray` is stopped with it."""
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception as exc:
        log(f"warning: ray.shutdown failed ({short_error(exc)})")


@dataclasses.dataclass
class WorkerPlan:
    """How many Ray Train workers, on what, with which collective backend."""

    num_workers: int
    use_gpu: bool
    cpus_per_worker: float
    backend: str
    reason: str

    def describe(self) -> str:
        """One line for the log."""
        kind = "GPU" if self.use_gpu else "CPU"
        return f"{self.num_workers} {kind} worker(s), {self.cpus_per_worker:g} CPU each" + \
            (", 1 GPU each" if self.use_gpu else "") + f", backend {self.backend} ({self.reason})"


def plan_workers(num_workers: int | None = None, cpus_per_worker: int | None = None,
                 started_here: bool = False) -> WorkerPlan:
    """Size the worker group from the cluster's free resources (see the module doc)."""
    import ray

    free = ray.available_resources() or ray.cluster_resources()
    gpus = int(free.get("GPU", 0) or 0)
    cpus = float(free.get("CPU", 0) or 0)
    num_workers = num_workers or _env_int("MLRECIPE_RAY_NUM_WORKERS")
    cpus_per_worker = cpus_per_worker or _env_int("MLRECIPE_RAY_CPUS_PER_WORKER")
    if num_workers is not None and num_workers < 1:
        raise ScriptError(f"--ray_num_workers={num_workers}: must be at least 1")
    if gpus and not force_cpu():
        n = num_workers or gpus
        per = cpus_per_worker if cpus_per_worker is not None else min(4, int(cpus // n))
        reason = f"{gpus} GPU(s) free in the cluster" if not num_workers else "--ray_num_workers"
        plan = WorkerPlan(n, True, per, "nccl", reason)
        needed = {"GPU": n, "CPU": n * per}
    else:
        n = num_workers or (2 if cpus >= 2 else 1)
        per = cpus_per_worker if cpus_per_worker is not None else max(1, int(cpus // n))
        why = "MLRECIPE_FORCE_CPU" if gpus else "no GPU in the cluster"
        reason = f"{why}; --ray_num_workers" if num_workers else \
            f"{why}: default 2 CPU workers (--ray_num_workers / MLRECIPE_RAY_NUM_WORKERS change it)"
        plan = WorkerPlan(n, False, per, "gloo", reason)
        needed = {"CPU": n * per}
    short = {k: v for k, v in needed.items() if v > float(free.get(k, 0) or 0)}
    if short:
        message = f"the workers need {needed} but the Ray cluster has {dict(free)} free"
        if started_here:
            raise ScriptError(f"{message} (set --ray_num_workers / --ray_cpus_per_worker or MLRECIPE_RAY_NUM_CPUS)")
        log(f"warning: {message}; waiting for the cluster to grow")
    return plan


def forwarded_env() -> dict[str, str]:
    """The driver's variables the workers get too (``MLRECIPE_*``, ``HF_*``, ``TRANSFORMERS_*`` ...)."""
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}


def scripts_root() -> str:
    """The directory that holds the ``mlrecipe_scripts`` package (the framework tree on a cluster)."""
    from mlrecipe_scripts import import_root

    return import_root()


def bootstrap(config: dict[str, Any]) -> None:
    """The function each Ray Train worker runs: make the scripts importable, then ``<module>.train_worker``.

    It uses nothing at module level, so Ray can ship it without importing this framework directory first.
    """
    import importlib
    import os as _os
    import sys as _sys

    for path in reversed(config["_sys_path"]):
        if path not in _sys.path:
            _sys.path.insert(0, path)
    _os.environ.update(config.get("_env") or {})
    module = importlib.import_module(config["_worker_module"])
    module.train_worker(config)


@dataclasses.dataclass
class WorkerContext:
    """What a worker knows about itself."""

    rank: int
    world_size: int
    local_rank: int
    device: Any
    precision: Any

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def worker_setup(config: dict[str, Any]) -> WorkerContext:
    """Rank, device (``cuda:<local rank>`` or cpu) and precision of this worker; offline defaults applied."""
    import ray.train
    import torch

    offline_defaults()
    ctx = ray.train.get_context()
    use_gpu = bool(config["_use_gpu"])
    if use_gpu:
        import ray.train.torch

        device = ray.train.torch.get_device()
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return WorkerContext(ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(), device,
                         select_precision(use_gpu))


def fit(worker_module: str, args: dict[str, Any], plan: WorkerPlan, name: str, storage_path: Path,
        extra: dict[str, Any] | None = None) -> Any:
    """Run ``<worker_module>.train_worker`` on ``plan.num_workers`` Ray Train workers; returns the Ray Result."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    config = {
        "args": args,
        "_worker_module": worker_module,
        "_sys_path": [scripts_root()],
        "_env": forwarded_env(),
        "_use_gpu": plan.use_gpu,
        "_backend": plan.backend,
        **(extra or {}),
    }
    # ship bootstrap by value: a worker can run it before the framework directory is importable there
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    resources = {"CPU": plan.cpus_per_worker}
    if plan.use_gpu:
        resources["GPU"] = 1
    max_failures = _env_int("MLRECIPE_RAY_MAX_FAILURES")
    trainer = TorchTrainer(
        train_loop_per_worker=bootstrap,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=plan.num_workers, use_gpu=plan.use_gpu,
                                     resources_per_worker=resources, placement_strategy="SPREAD"),
        torch_config=TorchConfig(backend=plan.backend, timeout_s=7200),
        run_config=RunConfig(name=name, storage_path=str(storage_path),
                             checkpoint_config=CheckpointConfig(num_to_keep=2),
                             failure_config=FailureConfig(max_failures=2 if max_failures is None else max_failures)),
    )
    try:
        return trainer.fit()
    except Exception as exc:
        raise ScriptError(f"the Ray Train run {name} failed: {root_cause(exc)} (the worker log above has the "
                          "details)") from exc


_SCRIPT_ERROR_RE = re.compile(r"ScriptError: (.+)")
_ANY_ERROR_RE = re.compile(r"^\s*((?:[\w.]+\.)?\w+(?:Error|Exception)): (.+)$", re.MULTILINE)


def root_cause(exc: BaseException) -> str:
    """The first line of what failed in a worker: a worker's ScriptError message when there is one, else the
    innermost ``SomeError: message`` line of the worker tracebacks, else the exception's own first line."""
    texts = [str(exc)]
    failures = getattr(exc, "worker_failures", None)
    if isinstance(failures, dict):
        texts += [str(f) for f in failures.values()]
    cause = exc.__cause__
    while cause is not None:
        texts.append(str(cause))
        cause = cause.__cause__
    for text in texts:
        found = _SCRIPT_ERROR_RE.findall(text)
        if found:
            return found[-1].strip()
    for text in texts:
        found = [f"{kind.rsplit('.', 1)[-1]}: {msg.strip()}" for kind, msg in _ANY_ERROR_RE.findall(text)]
        found = [line for line in found if not line.startswith(("WorkerGroupError", "TrainingFailedError"))]
        if found:
            return found[-1][:300]
    return short_error(exc)
