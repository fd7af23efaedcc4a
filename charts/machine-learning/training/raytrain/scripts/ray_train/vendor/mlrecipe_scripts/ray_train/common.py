"""Helpers shared by the ``framework: ray_train`` scripts.

Only the standard library is imported at module level, so that ``--help`` and argument errors are fast;
``torch`` / ``transformers`` / ``ray`` are imported inside the functions that need them.

What lives here:

* everything of :mod:`shared.common_base` (a link to the accelerate tree's ``shared/common_base.py``):
  :class:`ScriptError` / :func:`run_main`, the CLI families ``D0`` (trainers), ``C`` (converter) and ``T``
  (evaluator), offline defaults, device-dependent precision / attention, model and tokenizer loading that never
  downloads, :func:`atomic_dir` / :func:`atomic_file`, Trainer plumbing;
* paths: ``--results_dir`` joined to ``$HOME``, the Ray run name and the newest-checkpoint rule
  (``TorchTrainer_*`` / ``checkpoint_*`` by modification time, then ``checkpoint/``);
* :func:`training_arguments` with the ray_train scripts' handling of ``warmup_ratio`` and ``logging_dir``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mlrecipe_scripts.core.dataset_config import HFDatasetConfig
from mlrecipe_scripts.hf_trainer import common_base
from mlrecipe_scripts.hf_trainer.common_base import *  # noqa: F403 - re-exported (common_base.__all__ is part of this module's interface)
from mlrecipe_scripts.hf_trainer.common_base import ScriptError, _local_only, home_dir

__all__ = [
    *common_base.__all__, "CONVERTED_RE", "HF_CHECKPOINT_SUBDIR", "_local_only", "args_from_dict", "args_to_dict",
    "default_checkpoints_dir",
    "is_adapter_dir", "latest_ray_checkpoint", "results_root", "run_name",
]

CONVERTED_RE = re.compile(r"\.(hf_model|hf_peft|merged)$")
ArgsT = TypeVar("ArgsT")
HF_CHECKPOINT_SUBDIR = "checkpoint"  # what Ray Train's Hugging Face report callback names the HF dir


# --------------------------------------------------------------------------------------------------------------
# what the driver ships to the workers


def args_to_dict(args: Any) -> dict[str, Any]:
    """A text trainer's arguments as plain data (what the driver ships to the Ray workers);
    ``hfdc.custom_converter`` is dropped."""
    data = dataclasses.asdict(args)
    data["hfdc"].pop("custom_converter", None)
    return data


def args_from_dict(cls: Callable[..., ArgsT], data: dict[str, Any]) -> ArgsT:
    """The arguments ``cls`` back from :func:`args_to_dict`'s data."""
    data = dict(data)
    return cls(hfdc=HFDatasetConfig(**data.pop("hfdc")), **data)


# --------------------------------------------------------------------------------------------------------------
# paths


def results_root(results_dir: str) -> Path:
    """``--results_dir`` joined to ``$HOME`` (an absolute path is kept): the Ray storage path and HF scratch."""
    return (home_dir() / Path(results_dir).expanduser()).absolute()


def run_name(model_id: str) -> str:
    """The Ray run name of a model id: ``Qwen/Qwen3-14B`` -> ``Qwen-Qwen3-14B``."""
    return model_id.replace("/", "-")


def default_checkpoints_dir(base_model: str) -> Path:
    """``$HOME/results/<base_model with / -> ->`` (where ``ray_train_sft.py`` stores its Ray run)."""
    return home_dir() / "results" / run_name(base_model)


def _newest(paths: list[Path]) -> Path:
    return max(paths, key=lambda p: (p.stat().st_mtime, p.name))


def latest_ray_checkpoint(checkpoints_dir: Path, flag: str = "--checkpoints_dir") -> Path:
    """The HF checkpoint directory of the newest Ray Train checkpoint under ``checkpoints_dir``.

    The rule of the reference: the newest ``TorchTrainer_*`` directory by modification time when there is one
    (Ray Train v1 layout), then its newest ``checkpoint_*`` directory, then ``checkpoint/`` inside it; without
    ``TorchTrainer_*`` directories the ``checkpoint_*`` directories directly under ``checkpoints_dir`` (later
    layouts). Converted siblings (``*.hf_model`` ...) are skipped. A Ray checkpoint without a ``checkpoint/``
    subdirectory is used itself when it holds a model or an adapter.
    """
    if not checkpoints_dir.is_dir():
        raise ScriptError(f"{flag}={checkpoints_dir}: no such directory (no Ray Train run there; run "
                          "text/ray_train_sft.py first or pass --checkpoints_dir)")
    trainers = [p for p in checkpoints_dir.glob("TorchTrainer_*") if p.is_dir()]
    where = _newest(trainers) if trainers else checkpoints_dir
    found = [p for p in where.glob("checkpoint_*") if p.is_dir() and not CONVERTED_RE.search(p.name)]
    if not found:
        raise ScriptError(f"{flag}={checkpoints_dir}: no checkpoint_* directory in {where}")
    newest = _newest(found)
    inner = newest / HF_CHECKPOINT_SUBDIR
    if inner.is_dir():
        return inner
    if (newest / "config.json").is_file() or (newest / "adapter_config.json").is_file():
        return newest
    raise ScriptError(f"{newest}: a Ray checkpoint without a {HF_CHECKPOINT_SUBDIR}/ directory or model files")


def is_adapter_dir(path: Path) -> bool:
    """A PEFT adapter directory (``adapter_config.json`` in it)."""
    return (path / "adapter_config.json").is_file()


# --------------------------------------------------------------------------------------------------------------
# Trainer plumbing (transformers imported inside)


def training_arguments(**kwargs: Any) -> Any:  # type: ignore[no-redef]  # replaces common_base's (same signature)
    """``transformers.TrainingArguments`` from the keyword arguments this transformers version knows
    (:func:`shared.common_base.training_arguments`).

    Where this transformers version lacks them (transformers 5): ``logging_dir`` becomes ``TENSORBOARD_LOGGING_DIR``
    (set, not defaulted); ``warmup_ratio`` becomes a fractional ``warmup_steps``.
    """
    from transformers import TrainingArguments

    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    if kwargs.get("logging_dir") is not None and "logging_dir" not in known:
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(kwargs["logging_dir"])
    if "warmup_ratio" in kwargs and "warmup_ratio" not in known:
        ratio = kwargs.pop("warmup_ratio")
        if ratio and 0 < ratio < 1:
            kwargs["warmup_steps"] = float(ratio)
    return common_base.training_arguments(**kwargs)
