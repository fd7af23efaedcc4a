"""Helpers shared by the ``framework: nemo2`` scripts (this folder is delivered on its own, flat).

Only the standard library is imported at module level: ``--help``, argument errors, the checkpoint look-up and the
pure-Python configuration run without NeMo. NeMo 2 (``nemo.collections.llm``), ``nemo_run``, Megatron-Core, Lightning
and torch are imported inside the functions that need them, through :func:`require_nemo`, which turns a missing or
broken NeMo into one ``error:`` line naming the container image the reference uses.

* from ``script_common`` (the file the pytorch_lightning folder shares; this folder links to it):
  :class:`ScriptError` / :func:`run_main` (bad input ends a script with one ``error: ...`` line on stderr and exit
  status 1; argparse errors keep their status 2), logging, offline defaults, atomic writes, progress lines and the
  dataclass-driven CLI; from ``answer_metrics``: the local answer metrics;
* the CLI families of the reference scripts: ``D1`` (``fine_tune.py``: dataclass fields with their real defaults,
  flip-the-default booleans, a nested ``--hfdc_*`` config), ``C`` (converter) and ``T-nemo`` (evaluator);
* the checkpoint look-up of the reference (newest ``nemo_logs`` under ``$HOME/outputs``, newest timestamp run, newest
  ``nemo_logs--*`` checkpoint), atomic writes, ``$MLRECIPE_METRICS_FILE`` progress lines, local answer metrics.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.answer_metrics import rouge_l_f1, token_f1, words
from mlrecipe_scripts.lightning_core import script_common

# Re-exported (script_common.__all__ is part of this module's interface), except atomic_dir and check_model_source,
# which this module redefines (explicit names, so that the type checker sees the redefinitions).
from mlrecipe_scripts.lightning_core.script_common import (  # noqa: F401
    METRICS_VAR,
    ScriptError,
    add_flags,
    atomic_file,
    cli_fields,
    field_default,
    in_hf_cache,
    json_object,
    local_only,
    log,
    model_id_parts,
    nested_from_namespace,
    offline_defaults,
    quiet_unless_rank_zero,
    report_progress,
    run_main,
    score,
    short_error,
)

__all__ = [
    *script_common.__all__, "ADAPTER_META", "CHECKPOINT_PREFIX", "EXPORT_SUFFIX_RE", "NEMO_IMAGE", "adapter_base",
    "atomic_dir", "check_checkpoint", "data_parallel_size", "find_checkpoint", "find_nemo_logs_dirs", "int_env",
    "is_timestamp_dir", "poll_seconds", "require_cuda", "require_nemo", "rouge_l_f1", "sibling", "token_f1",
    "wait_for", "words",
]

NEMO_IMAGE = "nvcr.io/nvidia/nemo:25.09"
EXPORT_SUFFIX_RE = re.compile(r"\.(hf_model|hf_peft|merged)$")
CHECKPOINT_PREFIX = "nemo_logs--"
ADAPTER_META = "adapter_metadata.json"  # nemo.lightning.ckpt_utils.ADAPTER_META_FILENAME


def int_env(name: str, default: int = 0, environ: typing.Mapping[str, str] | None = None) -> int:
    """An integer environment variable (``default`` when unset or not a number)."""
    try:
        return int((environ if environ is not None else os.environ).get(name, "") or default)
    except ValueError:
        return default


# --------------------------------------------------------------------------------------------------------------
# NeMo


def require_nemo(what: str, *modules: str) -> dict[str, Any]:
    """Import ``modules`` (default: ``nemo.collections.llm``) and return them by name.

    Any failure (NeMo absent, NeMo 3 without ``nemo.collections.llm``, a broken dependency) becomes one
    :class:`ScriptError` line that says NeMo 2 is required and names the reference's container image.
    """
    import importlib

    loaded: dict[str, Any] = {}
    for name in modules or ("nemo.collections.llm",):
        try:
            loaded[name] = importlib.import_module(name)
        except Exception as exc:  # ImportError, or a dependency failing at import time
            raise ScriptError(
                f"{what} requires NeMo 2 (nemo_toolkit 2.x with nemo.collections.llm, megatron-core, nemo_run); "
                f"importing {name} failed ({short_error(exc)}); run it in the reference's container image "
                f"{NEMO_IMAGE}") from exc
    return loaded


def require_cuda(what: str, gpus: int) -> None:
    """At least ``gpus`` CUDA devices (NeMo 2's Megatron strategy runs on GPUs only)."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise ScriptError(f"{what} needs CUDA GPUs (NeMo 2 / Megatron-Core); none is visible here")
    if gpus > visible:
        raise ScriptError(f"--gpus_per_node={gpus}: only {visible} GPU(s) are visible here")


def data_parallel_size(num_nodes: int, gpus_per_node: int, tp: int, pp: int, cp: int) -> int:
    """GPUs / (TP x PP x CP); ValueError naming the flags when TP x PP x CP does not divide the GPUs."""
    world, model_parallel = num_nodes * gpus_per_node, tp * pp * cp
    if world % model_parallel:
        raise ValueError(f"--tensor_parallel_size={tp} x --pipeline_parallel_size={pp} x --context_parallel_size={cp}"
                         f" = {model_parallel} does not divide the {world} GPUs (--num_nodes={num_nodes} x "
                         f"--gpus_per_node={gpus_per_node})")
    return world // model_parallel


# --------------------------------------------------------------------------------------------------------------
# offline behaviour


def check_model_source(path: str, flag: str) -> str:
    """A local Hugging Face model directory, or a hub id in the local cache (unless downloads are allowed)."""
    return script_common.check_model_source(path, flag, what="Hugging Face model directory")


# --------------------------------------------------------------------------------------------------------------
# paths


def is_timestamp_dir(path: Path) -> bool:
    """A NeMoLogger run directory: ``A_B`` where ``A`` is ``x-y-z`` (``2025-01-31_12-00-00``)."""
    parts = path.name.split("_")
    return path.is_dir() and len(parts) == 2 and len(parts[0].split("-")) == 3


def _newest(paths: list[Path], prefer_real: bool = False) -> Path:
    """The newest path by modification time (ties: a non ``-last`` name, then the name)."""
    return max(paths, key=lambda p: (p.stat().st_mtime, not (prefer_real and p.name.endswith("-last")), p.name))


def find_nemo_logs_dirs(outputs: Path) -> list[Path]:
    """Every ``nemo_logs`` directory under ``outputs`` (not descending into checkpoints' weights / context)."""
    found: list[Path] = []
    for root, dirs, _files in os.walk(outputs):
        if Path(root).name == "nemo_logs":
            found.append(Path(root))
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if d not in ("weights", "context") and not d.startswith(".")]
    return found


def find_checkpoint(nemo_logs_dir: str | None, home: Path | None = None) -> Path:
    """The checkpoint directory to convert / evaluate (the reference's rule, §0.5 of the interface catalog).

    ``--nemo_logs_dir`` defaults to the newest (by mtime) ``nemo_logs`` directory under ``$HOME/outputs``. In it, the
    newest timestamp directory; in its ``checkpoints/``, the newest ``nemo_logs--*`` directory whose name does not end
    in ``.hf_model`` / ``.hf_peft`` / ``.merged``. ``--nemo_logs_dir`` may also name a timestamp directory or a
    checkpoint directory (one with ``context/``) directly.
    """
    if nemo_logs_dir:
        logs = Path(nemo_logs_dir).expanduser()
        flag = f"--nemo_logs_dir={nemo_logs_dir}"
        if not logs.is_dir():
            raise ScriptError(f"{flag}: no such directory")
    else:
        outputs = (home or Path.home()) / "outputs"
        found = find_nemo_logs_dirs(outputs) if outputs.is_dir() else []
        if not found:
            raise ScriptError(f"no nemo_logs directory under {outputs} (run fine_tune.py first, or pass "
                              "--nemo_logs_dir)")
        logs = _newest(found)
        flag = f"nemo_logs directory {logs}"
        log(f"found nemo_logs directory {logs}")
    if (logs / "context").is_dir():
        return logs
    if (logs / "checkpoints").is_dir():
        run_dir = logs
    else:
        runs = [d for d in logs.iterdir() if is_timestamp_dir(d)]
        if not runs:
            raise ScriptError(f"{flag}: no timestamp run directory (YYYY-MM-DD_HH-MM-SS) in it")
        run_dir = _newest(runs)
    checkpoints = run_dir / "checkpoints"
    if not checkpoints.is_dir():
        raise ScriptError(f"{checkpoints}: no such directory (the run saved no checkpoint)")
    candidates = [d for d in checkpoints.iterdir() if d.is_dir() and d.name.startswith(CHECKPOINT_PREFIX)
                  and not EXPORT_SUFFIX_RE.search(d.name)]
    if not candidates:
        raise ScriptError(f"{checkpoints}: no {CHECKPOINT_PREFIX}* checkpoint directory in it")
    return _newest(candidates, prefer_real=True)


def check_checkpoint(ckpt: Path) -> None:
    """A NeMo 2 checkpoint directory has ``context/`` and ``weights/``."""
    for sub in ("context", "weights"):
        if not (ckpt / sub).is_dir():
            raise ScriptError(f"{ckpt / sub}: no such directory (not a NeMo 2 checkpoint)")


def adapter_base(ckpt: Path) -> Path | None:
    """For a PEFT (LoRA) checkpoint, the base checkpoint its ``weights/adapter_metadata.json`` names; else None."""
    meta = ckpt / "weights" / ADAPTER_META
    if not meta.is_file():
        return None
    try:
        base = json.loads(meta.read_text()).get("model_ckpt_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise ScriptError(f"{meta}: unreadable ({short_error(exc)})") from exc
    if not base:
        raise ScriptError(f"{meta}: no model_ckpt_path in it")
    return Path(str(base))


def sibling(ckpt: Path, suffix: str) -> Path:
    """``<checkpoint dir><suffix>`` next to the checkpoint (the whole name is kept: ``...=51200.0.hf_model``)."""
    return ckpt.with_name(ckpt.name + suffix)


def wait_for(paths: list[Path], what: str, poll_seconds: float, timeout_seconds: float | None = None) -> None:
    """Poll until all ``paths`` exist (a line every few minutes); ScriptError after ``timeout_seconds``."""
    start = last = time.monotonic()
    while not all(p.exists() for p in paths):
        now = time.monotonic()
        if timeout_seconds is not None and now - start > timeout_seconds:
            raise ScriptError(f"gave up after {timeout_seconds:.0f}s waiting for {what} ({paths[0]})")
        if now - last > 300:
            log(f"still waiting for {what} ({paths[0]})")
            last = now
        time.sleep(poll_seconds)


def poll_seconds() -> float:
    """How often waiting nodes look for a marker (10 s; ``MLRECIPE_DATA_POLL_SECONDS`` overrides)."""
    try:
        return max(0.05, float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "10")))
    except ValueError:
        return 10.0


@contextlib.contextmanager
def atomic_dir(final: Path, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling path of ``final`` (not created); on success it becomes ``final``, else it is
    removed. An existing ``final`` is replaced, or with ``replace=False`` is an error."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        yield tmp
        if not tmp.exists():
            raise ScriptError(f"{final}: nothing was written")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists() or final.is_symlink():
        if not replace:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ScriptError(f"{final}: already exists")
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


# --------------------------------------------------------------------------------------------------------------
# progress lines for mlrecipe


def _metrics_callback_class() -> type:
    """A Lightning callback writing progress lines (train loss, lr, val loss) on global rank 0."""
    from lightning.pytorch.callbacks import Callback

    class MetricsCallback(Callback):
        """Writes ``$MLRECIPE_METRICS_FILE`` lines: every ``every_n_steps`` optimizer steps, and after validation."""

        def __init__(self, every_n_steps: int = 10):
            super().__init__()
            self.every_n_steps = max(1, int(every_n_steps))

        @staticmethod
        def _numbers(trainer: Any, keys: tuple[str, ...]) -> dict[str, Any]:
            metrics = getattr(trainer, "callback_metrics", {}) or {}
            return {k.replace("reduced_", ""): metrics[k] for k in keys if k in metrics}

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step = int(trainer.global_step)
            if trainer.is_global_zero and step % self.every_n_steps == 0:
                report_progress(step, trainer.max_steps, **self._numbers(trainer, ("reduced_train_loss", "lr")))

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.is_global_zero and not getattr(trainer, "sanity_checking", False):
                report_progress(int(trainer.global_step), trainer.max_steps, **self._numbers(trainer, ("val_loss",)))

    MetricsCallback.__module__ = __name__
    MetricsCallback.__qualname__ = "MetricsCallback"
    return MetricsCallback


_LAZY: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    """``MetricsCallback`` is created on first use (importing this module does not import Lightning); it resolves by
    its import path ``nemo2_common.MetricsCallback``, so nemo_run can serialize a ``run.Config`` of it."""
    if name == "MetricsCallback":
        if name not in _LAZY:
            _LAZY[name] = _metrics_callback_class()
        return _LAZY[name]
    raise AttributeError(name)


# --------------------------------------------------------------------------------------------------------------
# CLI families


