"""Helpers shared by the ``framework: accelerate`` scripts.

Only the standard library is imported at module level, so that ``--help`` and argument errors are fast;
``torch`` / ``transformers`` are imported inside the functions that need them.

What lives here:

* everything of :mod:`shared.common_base` (the part the ray_train tree shares, by a link to that file):
  :class:`ScriptError` / :func:`run_main`, the CLI families ``D0`` / ``C`` / ``T``, offline defaults, precision,
  model and tokenizer loading that never downloads, :func:`atomic_dir` / :func:`atomic_file`, Trainer plumbing;
* paths: ``$HOME/results/<model id>`` and the latest ``checkpoint-<N>`` rule;
* device-dependent switches (:func:`on_off_auto`), the final save under FSDP, and how the preference trainers
  (reward model, DPO, PPO) find and load converted SFT checkpoints.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer import common_base
from mlrecipe_scripts.hf_trainer.common_base import *  # noqa: F403 - re-exported (common_base.__all__ is part of this module's interface)
from mlrecipe_scripts.hf_trainer.common_base import (
    ScriptError,
    check_model_source,
    home_dir,
    load_pretrained,
    log,
    model_id_parts,
    short_error,
)

__all__ = [
    *common_base.__all__, "CHECKPOINT_RE", "CONVERTED_NAME_RE", "CONVERTED_RE", "CONVERTED_STEP_RE",
    "check_pretrained_dir", "checkpoint_step", "is_peft_dir", "latest_checkpoint", "latest_converted_checkpoint",
    "load_sft_model", "on_off_auto", "peft_base_model", "resolve_sft_model_path",
    "results_dir", "sft_tokenizer_source", "switch_on",
]

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
CONVERTED_RE = re.compile(r"\.(hf_model|hf_peft|merged)")


# --------------------------------------------------------------------------------------------------------------
# paths


def results_dir(model_id: str, home: Path | None = None) -> Path:
    """``$HOME/results/<model id>`` with the slash kept (``results/Qwen/Qwen3-14B``)."""
    return (home or home_dir()) / "results" / Path(*model_id_parts(model_id) or ["model"])


def checkpoint_step(path: Path) -> int | None:
    """N for a directory named ``checkpoint-N`` (converted siblings such as ``checkpoint-N.hf_model`` give None)."""
    if CONVERTED_RE.search(path.name):
        return None
    match = CHECKPOINT_RE.match(path.name)
    return int(match.group(1)) if match else None


def latest_checkpoint(checkpoints_dir: Path, flag: str = "--checkpoints_dir") -> Path:
    """The ``checkpoint-<N>`` directory with the highest N under ``checkpoints_dir`` (ScriptError when none)."""
    if not checkpoints_dir.is_dir():
        raise ScriptError(f"{flag}={checkpoints_dir}: no such directory (nothing to convert)")
    found = [(step, p) for p in checkpoints_dir.iterdir() if p.is_dir() and (step := checkpoint_step(p)) is not None]
    if not found:
        raise ScriptError(f"{flag}={checkpoints_dir}: no checkpoint-<N> directory in it")
    return max(found)[1]


# --------------------------------------------------------------------------------------------------------------
# device-dependent switches


def on_off_auto(value: str) -> str:
    """A switch whose default depends on the device: ``auto`` / ``true`` / ``false`` (also 1/0, yes/no, on/off).

    Used as an argparse ``type``; returns ``"auto"``, ``"true"`` or ``"false"``.
    """
    text = str(value).strip().lower()
    if text in ("auto", ""):
        return "auto"
    if text in ("1", "true", "yes", "on"):
        return "true"
    if text in ("0", "false", "no", "off"):
        return "false"
    raise argparse.ArgumentTypeError(f"{value!r}: expected true, false or auto")


on_off_auto.__name__ = "true|false|auto value"


def switch_on(choice: str, auto: bool) -> bool:
    """An :func:`on_off_auto` value as a bool: ``auto`` gives ``auto`` (the device's choice)."""
    return auto if choice == "auto" else choice == "true"


# --------------------------------------------------------------------------------------------------------------
# the final save


# --------------------------------------------------------------------------------------------------------------
# preference training (reward model, DPO, PPO): converted SFT checkpoints and how they are loaded

CONVERTED_NAME_RE = re.compile(r"\.(hf_model|hf_peft)")
CONVERTED_STEP_RE = re.compile(r"^checkpoint-(\d+)")


def is_peft_dir(path: Path | str) -> bool:
    """A PEFT adapter directory: named ``*.hf_peft`` or holding ``adapter_config.json``."""
    path = Path(path)
    return path.name.endswith(".hf_peft") or (path / "adapter_config.json").is_file()


def latest_converted_checkpoint(results: Path, flag: str) -> Path:
    """The converted SFT model to start from: the highest N among ``checkpoint-N*.hf_model|.hf_peft`` directories.

    ``flag`` names the flag that would have avoided the lookup (e.g. ``--sft_model_path``); the error says so.
    At equal N a merged ``.hf_model`` is preferred to an adapter ``.hf_peft``.
    """
    hint = f"pass {flag}, or run shared/convert_checkpoint_to_hf.py first"
    if not results.is_dir():
        raise ScriptError(f"{flag} not given and {results} does not exist (no converted checkpoint; {hint})")
    found = []
    for path in results.iterdir():
        match = CONVERTED_STEP_RE.match(path.name)
        if match and path.is_dir() and CONVERTED_NAME_RE.search(path.name):
            found.append((int(match.group(1)), ".hf_model" in path.name, path.name, path))
    if not found:
        raise ScriptError(f"{flag} not given and {results} has no converted checkpoint-<N>.hf_model / .hf_peft "
                          f"directory ({hint})")
    return max(found)[3]


def check_pretrained_dir(path: str, flag: str) -> str:
    """Validate a model source that may also be a PEFT adapter directory (``config.json`` or ``adapter_config.json``).

    Hub ids are accepted only when they are in the local cache (see :func:`check_model_source`).
    """
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file() and not (local / "adapter_config.json").is_file():
            raise ScriptError(f"{flag}={path}: not a model directory (no config.json or adapter_config.json in it)")
        return str(local)
    return check_model_source(path, flag)


def peft_base_model(adapter_dir: str, fallback: str, fallback_flag: str) -> tuple[str, str]:
    """(base model path, what named it) for a PEFT adapter dir: ``base_model.txt`` if present, else ``fallback``."""
    note = Path(adapter_dir) / "base_model.txt"
    if note.is_file():
        base = note.read_text(encoding="utf-8").strip()
        if not base:
            raise ScriptError(f"{note}: empty (it should hold the base model path)")
        return check_model_source(base, str(note)), str(note)
    return check_model_source(fallback, fallback_flag), fallback_flag


def load_sft_model(path: str, flag: str, hf_model_id: str, auto_class: str = "AutoModelForCausalLM",
                   **kwargs: Any) -> Any:
    """The SFT model at ``path`` as one plain model: a PEFT adapter dir is loaded on its base model (from
    ``base_model.txt``, else ``--hf_model_id``) and merged; a model dir is loaded as is. ``kwargs`` go to
    :func:`load_pretrained` (dtype, attention, ``num_labels`` ...)."""
    if not is_peft_dir(path):
        return load_pretrained(path, flag, auto_class, **kwargs)
    base, named_by = peft_base_model(path, hf_model_id, "--hf_model_id")
    model = load_pretrained(base, named_by, auto_class, **kwargs)
    from peft import PeftConfig, PeftModel

    try:
        config = PeftConfig.from_pretrained(path)
        if auto_class != "AutoModelForCausalLM":  # a CAUSAL_LM adapter on e.g. a classifier: the plain PeftModel
            config.task_type = None
        model = PeftModel.from_pretrained(model, path, config=config)
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot apply the adapter to {base} ({short_error(exc)})") from exc
    log(f"merging the SFT adapter {path} into {base}")
    return model.merge_and_unload()


def resolve_sft_model_path(sft_model_path: str | None, hf_model_id: str, flag: str = "--sft_model_path",
                           results: Path | None = None) -> str:
    """``sft_model_path`` validated, or (when not given) the newest converted checkpoint under ``results``
    (default ``$HOME/results/<hf_model_id>``), validated too; for an adapter directory its base model must exist."""
    if sft_model_path:
        path = check_pretrained_dir(sft_model_path, flag)
    else:
        found = latest_converted_checkpoint(results or results_dir(hf_model_id), flag)
        log(f"{flag} not given: using {found} (the newest converted checkpoint under {found.parent})")
        path = check_pretrained_dir(str(found), flag)
    if is_peft_dir(path):
        peft_base_model(path, hf_model_id, "--hf_model_id")
    return path


def sft_tokenizer_source(path: str, hf_model_id: str) -> tuple[str, str]:
    """(where to load the tokenizer from, the flag or file naming it) for an SFT model: the directory itself, or,
    for an adapter directory without tokenizer files, its base model."""
    local = Path(path)
    has_tokenizer = (local / "tokenizer_config.json").is_file() or (local / "tokenizer.json").is_file()
    if not local.is_dir() or has_tokenizer or not is_peft_dir(local):
        return path, "--sft_model_path"
    return peft_base_model(path, hf_model_id, "--hf_model_id")
