"""Helpers shared by the ``framework: pytorch_lightning`` scripts (this folder is delivered on its own, flat).

Only the standard library is imported at module level, so that ``--help`` and argument errors are fast; torch,
transformers and Lightning are imported inside the functions that need them.

* :class:`ScriptError` / :func:`run_main`: bad input ends a script with one ``error: ...`` line on stderr and exit
  status 1 (argparse errors keep their status 2);
* the CLI families of the reference scripts: ``D1`` (``fine_tune.py``: dataclass fields with their real defaults,
  flip-the-default booleans, a comma list, a nested ``--hfdc_*`` config), ``C`` (converter) and ``T`` (evaluator);
* how the process was launched (torchrun, or ``python`` with Lightning starting the other local processes);
* device-dependent precision and attention, model / tokenizer loading that never downloads by default;
* the newest ``model-*.ckpt`` rule, atomic writes, ``$MLRECIPE_METRICS_FILE`` progress lines.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import shutil
import sys
import time
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

DEFAULT_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
METRICS_VAR = "MLRECIPE_METRICS_FILE"


class ScriptError(Exception):
    """Bad input (a flag value, a missing path): reported as one ``error:`` line on stderr, exit status 1."""


def run_main(main: Callable[[], int | None]) -> None:
    """Run ``main``; a :class:`ScriptError` becomes one stderr line and exit status 1."""
    try:
        code = main()
    except ScriptError as exc:
        sys.stdout.flush()
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(code or 0)


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


def short_error(exc: BaseException) -> str:
    """The exception's type and first line (for one-line error messages)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


# --------------------------------------------------------------------------------------------------------------
# launch topology


@dataclasses.dataclass
class Launch:
    """How this process was started.

    ``torchrun``: every rank is a process of its own (``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``WORLD_SIZE``
    set by the launcher). Otherwise (``python fine_tune.py``, as the reference recipe runs it) Lightning starts the
    other local processes itself; they carry ``LOCAL_RANK``, and ``NODE_RANK`` names the node.
    """

    torchrun: bool
    node_rank: int
    local_rank: int
    rank: int | None  # known under torchrun; else computed once the processes per node are known

    def global_rank(self, devices: int) -> int:
        """The global rank, given the processes per node."""
        return self.rank if self.rank is not None else self.node_rank * devices + self.local_rank


def _int_env(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def detect_launch() -> Launch:
    """Read the launcher's environment (torchrun / Lightning's own process launcher)."""
    env = os.environ
    if all(k in env for k in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")):
        return Launch(True, _int_env("GROUP_RANK", _int_env("NODE_RANK")), _int_env("LOCAL_RANK"), _int_env("RANK"))
    return Launch(False, _int_env("NODE_RANK", _int_env("GROUP_RANK")), _int_env("LOCAL_RANK"), None)


def wait_for(path: Path, what: str, poll_seconds: float) -> None:
    """Poll until ``path`` exists; give up (ScriptError) if the process that started this one has gone."""
    parent = os.getppid()
    while not path.exists():
        if os.getppid() != parent:
            raise ScriptError(f"the launching process exited while this rank waited for {what} ({path})")
        time.sleep(poll_seconds)


# --------------------------------------------------------------------------------------------------------------
# offline behaviour, device, loading


def offline_defaults() -> None:
    """Never download unless asked: ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` default to 1 (set 0 to allow).

    Must run before ``huggingface_hub`` is imported (it reads the variables once).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")


def local_only() -> bool:
    """True unless ``HF_HUB_OFFLINE`` is 0/false."""
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False")


@dataclasses.dataclass
class Device:
    """Where and how to train or run a model here."""

    kind: str  # "cuda" or "cpu"
    dtype: Any  # torch dtype of the weights
    attn_implementation: str
    bf16: bool

    def describe(self) -> str:
        return f"device {self.kind}, weights {str(self.dtype).replace('torch.', '')}, " \
               f"attention {self.attn_implementation}"


def select_device() -> Device:
    """CUDA with bf16: bf16 weights, flash_attention_2 when the flash-attn package is there, else sdpa.
    CUDA without bf16: fp32 weights (16-bit autocast), sdpa. CPU: fp32 weights and sdpa.

    ``MLRECIPE_FORCE_CPU=1`` picks the CPU even where CUDA is present; ``MLRECIPE_ATTN_IMPLEMENTATION`` (e.g.
    ``eager``) overrides the attention kernel.
    """
    import importlib.util

    import torch

    override = os.environ.get("MLRECIPE_ATTN_IMPLEMENTATION")
    if torch.cuda.is_available() and os.environ.get("MLRECIPE_FORCE_CPU", "") not in ("1", "true"):
        attn = override or ("flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa")
        if torch.cuda.is_bf16_supported():
            return Device("cuda", torch.bfloat16, attn, bf16=True)
        return Device("cuda", torch.float32, override or "sdpa", bf16=False)
    return Device("cpu", torch.float32, override or "sdpa", bf16=False)


def in_hf_cache(repo_id: str, filename: str) -> bool:
    """Whether ``filename`` of the hub repo ``repo_id`` is in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except (ImportError, OSError, ValueError):  # not installed, unreadable cache, not a valid repo id
        return False


def check_model_source(path: str, flag: str) -> str:
    """A local model directory, or a hub id that is in the local cache (unless downloads are allowed).

    Returns ``path``; raises :class:`ScriptError` naming ``flag`` otherwise.
    """
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ScriptError(f"{flag}={path}: not a model directory (no config.json in it)")
        return str(local)
    if local.exists():
        raise ScriptError(f"{flag}={path}: not a directory")
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise ScriptError(f"{flag}={path}: no such directory")
    if local_only() and not in_hf_cache(path, "config.json"):
        raise ScriptError(f"{flag}={path}: not a local directory and not in the Hugging Face cache (downloads "
                          "are off: pass a local model directory, or set HF_HUB_OFFLINE=0)")
    return path


def load_tokenizer(path: str, flag: str) -> Any:
    """The tokenizer at ``path`` (never downloads by default); pad falls back to eos; right padding."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=True,
                                                  local_files_only=local_only())
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a tokenizer ({short_error(exc)})") from exc
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ScriptError(f"{flag}={path}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, flag: str, dtype: Any = "auto", attn_implementation: str = "sdpa",
                   device_map: Any = None, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` that never downloads by default; failures name ``flag``.

    An attention kernel the model (or this machine) lacks falls back to ``sdpa``, then ``eager``.
    """
    from transformers import AutoModelForCausalLM

    common: dict[str, Any] = dict(dtype=dtype, trust_remote_code=True, local_files_only=local_only(), **kwargs)
    if device_map is not None:
        common["device_map"] = device_map
    kernels = [attn_implementation] + [k for k in ("sdpa", "eager") if k != attn_implementation]
    try:
        for kernel, fallback in itertools.pairwise(kernels):
            try:
                return AutoModelForCausalLM.from_pretrained(path, attn_implementation=kernel, **common)
            except (ValueError, ImportError) as exc:
                if "attn" not in str(exc).lower() and "attention" not in str(exc).lower():
                    raise
                log(f"note: attention {kernel} is not available ({short_error(exc)}); trying {fallback}")
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation=kernels[-1], **common)
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a causal LM from it ({short_error(exc)})") from exc


# --------------------------------------------------------------------------------------------------------------
# paths


def model_id_parts(model_id: str) -> list[str]:
    """``Qwen/Qwen3-8B`` -> ``[Qwen, Qwen3-8B]`` (an absolute path becomes relative; ``..`` dropped)."""
    return [p for p in PurePosixPath(model_id).parts if p not in ("/", ".", "..", "")] or ["model"]


def results_dir(model_id: str) -> Path:
    """``$HOME/results/<model id>`` with the slash kept (``results/Qwen/Qwen3-14B``)."""
    return Path.home() / "results" / Path(*model_id_parts(model_id))


def newest_checkpoint(checkpoints_dir: Path, flag: str = "--checkpoints_dir") -> Path:
    """The newest (by modification time; then by name) ``model-*.ckpt`` in ``checkpoints_dir``."""
    if not checkpoints_dir.is_dir():
        raise ScriptError(f"{flag}={checkpoints_dir}: no such directory (no training checkpoints; run fine_tune.py "
                          "first or pass --checkpoints_dir)")
    found = [p for p in checkpoints_dir.glob("model-*.ckpt") if p.is_file()]
    if not found:
        raise ScriptError(f"{flag}={checkpoints_dir}: no model-*.ckpt file in it")
    return max(found, key=lambda p: (p.stat().st_mtime, p.name))


def sibling_path(ckpt: Path, suffix: str) -> Path:
    """``model-...-step=S.ckpt`` -> ``model-...-step=S<suffix>`` (only the final ``.ckpt`` is replaced)."""
    return ckpt.with_name(ckpt.name.removesuffix(".ckpt") + suffix)


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling of ``final``; on success it replaces ``final``, on failure it is removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


@contextlib.contextmanager
def atomic_file(final: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; on success it is renamed onto ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, final)


# --------------------------------------------------------------------------------------------------------------
# progress lines for mlrecipe


def report_progress(step: int | None = None, total: int | None = None, **metrics: Any) -> None:
    """Append ``{"time", "step", "total", "metrics"}`` to ``$MLRECIPE_METRICS_FILE`` (nothing when unset).

    The caller makes sure only global rank 0 calls it.
    """
    path = os.environ.get(METRICS_VAR)
    if not path:
        return
    record: dict[str, Any] = {"time": round(time.time(), 3)}
    if step is not None:
        record["step"] = int(step)
    if total:
        record["total"] = int(total)
    numbers = {}
    for key, value in metrics.items():
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
            continue
        numbers[key] = float(value)
    if numbers:
        record["metrics"] = numbers
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    except OSError as exc:  # best effort: never stop a run for it
        log(f"warning: cannot write {METRICS_VAR}={path}: {exc}")


# --------------------------------------------------------------------------------------------------------------
# CLI families


def comma_list(value: str | list[str] | None) -> list[str]:
    """``"q_proj, k_proj"`` -> ``["q_proj", "k_proj"]`` (items stripped, empty items dropped)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


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


def field_default(f: dataclasses.Field) -> Any:
    """A field's default (``dataclasses.MISSING`` when it has none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def add_flags(parser: Any, cls: type, skip: tuple[str, ...] = (), prefix: str = "",
              none_defaults: bool = False) -> None:
    """One ``--<prefix><field>`` per field: typed; booleans ``store_true`` / ``store_false`` (the flag flips the
    default); lists as a comma string; dicts as a JSON object. ``none_defaults``: argparse default None (used for
    nested configs, to see which flags were given)."""
    for f, kind in cli_fields(cls, skip):
        default = field_default(f)
        shown = "required" if default is dataclasses.MISSING else \
            ",".join(map(str, default)) if isinstance(default, list) else default
        flag, hint = f"--{prefix}{f.name}", f"(default: {shown!r})".replace("%", "%%")
        if kind == "bool":
            flips_to = not bool(default)
            parser.add_argument(flag, dest=f"{prefix}{f.name}", action="store_true" if flips_to else "store_false",
                                default=None if none_defaults else bool(default), help=f"flag: sets {flips_to} {hint}")
            continue
        value = None if none_defaults or default is dataclasses.MISSING else \
            ",".join(map(str, default)) if kind == "list" and isinstance(default, list) else default
        caster = {"int": int, "float": float, "json": json_object}.get(kind, str)
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
