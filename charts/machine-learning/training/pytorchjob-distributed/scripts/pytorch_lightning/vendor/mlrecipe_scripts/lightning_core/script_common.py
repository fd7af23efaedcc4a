"""What the ``framework: pytorch_lightning`` and ``framework: nemo2`` scripts share (both folders are delivered
flat, on their own: the pytorch_lightning folder has this file, the nemo2 folder links ``script_common.py`` to it).

Standard library only (and the scoring of :mod:`mlrecipe_scripts.core.evaluation`). ``ptl_common`` and ``nemo2_common``
re-export everything here and add their own launch, device and checkpoint rules, so the scripts keep importing
everything from their own ``*_common`` module.

* from ``script_core.py`` (the file all four framework trees share): :class:`ScriptError` / :func:`run_main` (bad
  input ends a script with one ``error: ...`` line on stderr and exit status 1; argparse errors keep their status
  2), :func:`offline_defaults`, :func:`atomic_file`;
* :func:`log`, quiet on ranks other than 0 once told so;
* offline defaults and model sources that never download by default;
* :func:`atomic_file`, ``$MLRECIPE_METRICS_FILE`` progress lines (:func:`report_progress`, from
  :mod:`mlrecipe_scripts.core.progress`, the scripts' one writer);
* the dataclass-driven CLI (:func:`add_flags`, :func:`nested_from_namespace`);
* :func:`score`: the evaluators' metric (BERTScore F1, else the local token F1 and ROUGE-L F1).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import types
import typing
from pathlib import Path, PurePosixPath
from typing import Any

from mlrecipe_scripts.core.evaluation import bertscore_f1, local_scores
from mlrecipe_scripts.core.progress import METRICS_VAR, report_progress
from mlrecipe_scripts.core.script_core import (
    ScriptError,
    atomic_dir,
    atomic_file,
    field_default,
    local_only,
    offline_defaults,
    run_main,
    short_error,
)

__all__ = [
    "METRICS_VAR", "ScriptError", "add_flags", "atomic_dir", "atomic_file", "check_model_source", "cli_fields",
    "field_default",
    "in_hf_cache", "json_object", "local_only", "log", "model_id_parts", "nested_from_namespace", "offline_defaults",
    "quiet_unless_rank_zero", "report_progress", "run_main", "score", "short_error",
]

_QUIET = False


def log(message: str, all_ranks: bool = False) -> None:
    """One progress line, flushed (the recipes ``tee`` stdout into a log file). After :func:`quiet_unless_rank_zero`
    marked this process as a non-zero rank, only ``all_ranks`` lines are printed."""
    if all_ranks or not _QUIET:
        print(message, flush=True)


def quiet_unless_rank_zero(rank: int) -> None:
    """Print progress lines only on global rank 0 from now on (errors are reported on every rank)."""
    global _QUIET
    _QUIET = rank != 0


# --------------------------------------------------------------------------------------------------------------
# offline behaviour, model sources


def in_hf_cache(repo_id: str, filename: str) -> bool:
    """Whether ``filename`` of the hub repo ``repo_id`` is in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except (ImportError, OSError, ValueError):  # not installed, unreadable cache, not a valid repo id
        return False


def check_model_source(path: str, flag: str, what: str = "model directory") -> str:
    """A local model directory, or a hub id that is in the local cache (unless downloads are allowed).

    Returns ``path``; raises :class:`ScriptError` naming ``flag`` otherwise (a directory without ``config.json``
    is "not a <what>").
    """
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ScriptError(f"{flag}={path}: not a {what} (no config.json in it)")
        return str(local)
    if local.exists():
        raise ScriptError(f"{flag}={path}: not a directory")
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise ScriptError(f"{flag}={path}: no such directory")
    if local_only() and not in_hf_cache(path, "config.json"):
        raise ScriptError(f"{flag}={path}: not a local directory and not in the Hugging Face cache (downloads "
                          "are off: pass a local model directory, or set HF_HUB_OFFLINE=0)")
    return path


# --------------------------------------------------------------------------------------------------------------
# paths, atomic writes, progress lines


def model_id_parts(model_id: str) -> list[str]:
    """``Qwen/Qwen3-8B`` -> ``[Qwen, Qwen3-8B]`` (an absolute path becomes relative; ``..`` dropped)."""
    return [p for p in PurePosixPath(model_id).parts if p not in ("/", ".", "..", "")] or ["model"]


# --------------------------------------------------------------------------------------------------------------
# CLI families


def _kind(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else str
        origin = typing.get_origin(tp)
    if tp is bool:
        return "bool"
    if tp in (int, float, str):
        return tp.__name__
    if (origin or tp) in (list, tuple):
        return "list"
    if (origin or tp) is dict:
        return "json"
    return "str"


def json_object(text: str) -> dict | None:
    """argparse type for ``--hfdc_field_mapping``: a JSON object ("" / "null" / "None" give None)."""
    if text.strip() in ("", "None", "null"):
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a JSON object ({exc})") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


json_object.__name__ = "JSON object"


def cli_fields(cls: type, skip: tuple[str, ...] = ()) -> list[tuple[dataclasses.Field, str]]:
    """(field, kind) for each init field of the dataclass ``cls`` not in ``skip``."""
    hints = typing.get_type_hints(cls)
    return [(f, _kind(hints[f.name])) for f in dataclasses.fields(cls) if f.init and f.name not in skip]


def add_flags(parser: Any, cls: type, skip: tuple[str, ...] = (), prefix: str = "", none_defaults: bool = False,
              bool_flips: bool = True) -> None:
    """One ``--<prefix><field>`` per field: typed; lists as a comma string; dicts as a JSON object.

    Booleans: with ``bool_flips`` (families D1 / C) a flag with no value, ``store_true`` when the default is False and
    ``store_false`` when it is True; else typed ``bool``. ``none_defaults``: argparse default None (nested configs:
    to see which flags were given).
    """
    for f, kind in cli_fields(cls, skip):
        default = field_default(f)
        shown = "required" if default is dataclasses.MISSING else \
            ",".join(map(str, default)) if isinstance(default, list) else default
        flag, hint = f"--{prefix}{f.name}", f"(default: {shown!r})".replace("%", "%%")
        if kind == "bool" and bool_flips:
            flips_to = not bool(default)
            parser.add_argument(flag, dest=f"{prefix}{f.name}", action="store_true" if flips_to else "store_false",
                                default=None if none_defaults else bool(default), help=f"flag: sets {flips_to} {hint}")
            continue
        value = None if none_defaults or default is dataclasses.MISSING else \
            ",".join(map(str, default)) if kind == "list" and isinstance(default, list) else default
        caster = {"int": int, "float": float, "json": json_object, "bool": bool}.get(kind, str)
        parser.add_argument(flag, dest=f"{prefix}{f.name}", type=caster, default=value, help=hint)


def nested_from_namespace(ns: argparse.Namespace, parser: Any, cls: type, prefix: str,
                          skip: tuple[str, ...] = ()) -> Any:
    """The nested config rebuilt from its class defaults plus the ``--<prefix>*`` flags given (None if none is).

    A field without a default (``dataset_name``) is then required; a ``ValueError`` of the class (its
    ``__post_init__`` checks) becomes an argparse error (exit status 2).
    """
    given = {f.name: getattr(ns, f"{prefix}{f.name}") for f, _ in cli_fields(cls, skip)
             if getattr(ns, f"{prefix}{f.name}", None) is not None}
    if not given:
        return None
    missing = [f.name for f, _ in cli_fields(cls, skip) if field_default(f) is dataclasses.MISSING
               and f.name not in given]
    if missing:
        parser.error(f"--{prefix}{missing[0]} is required when any --{prefix}* flag is given (the "
                     f"{cls.__name__} is then rebuilt from its class defaults)")
    try:
        return cls(**given)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))


# --------------------------------------------------------------------------------------------------------------
# scoring (the evaluators)


def score(predictions: list[str], references: list[str]) -> tuple[str, dict[str, float]]:
    """(metric, mean scores): BERTScore F1 (as the reference) when it can run, else token F1 and ROUGE-L F1.

    ``MLRECIPE_METRIC=local`` skips BERTScore.
    """
    reason = "MLRECIPE_METRIC=local"
    if os.environ.get("MLRECIPE_METRIC", "").lower() != "local":
        try:
            return "bertscore", bertscore_f1(predictions, references)
        except Exception as exc:
            reason = f"BERTScore unavailable: {short_error(exc)}"
    log(f"note: scoring with local metrics (token-overlap F1 and ROUGE-L F1) instead of BERTScore ({reason})")
    return "local", local_scores(predictions, references)
