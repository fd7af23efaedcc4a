"""Helpers shared by the ``framework: nemo2`` scripts (this folder is delivered on its own, flat).

Only the standard library is imported at module level: ``--help``, argument errors, the checkpoint look-up and the
pure-Python configuration run without NeMo. NeMo 2 (``nemo.collections.llm``), ``nemo_run``, Megatron-Core, Lightning
and torch are imported inside the functions that need them, through :func:`require_nemo`, which turns a missing or
broken NeMo into one ``error:`` line naming the container image the reference uses.

* :class:`ScriptError` / :func:`run_main`: bad input ends a script with one ``error: ...`` line on stderr and exit
  status 1 (argparse errors keep their status 2);
* the CLI families of the reference scripts: ``D1`` (``fine_tune.py``: dataclass fields with their real defaults,
  flip-the-default booleans, a nested ``--hfdc_*`` config), ``C`` (converter) and ``T-nemo`` (evaluator);
* the checkpoint look-up of the reference (newest ``nemo_logs`` under ``$HOME/outputs``, newest timestamp run, newest
  ``nemo_logs--*`` checkpoint), atomic writes, ``$MLRECIPE_METRICS_FILE`` progress lines, local answer metrics.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import string
import sys
import time
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

NEMO_IMAGE = "nvcr.io/nvidia/nemo:25.09"
METRICS_VAR = "MLRECIPE_METRICS_FILE"
EXPORT_SUFFIX_RE = re.compile(r"\.(hf_model|hf_peft|merged)$")
CHECKPOINT_PREFIX = "nemo_logs--"
ADAPTER_META = "adapter_metadata.json"  # nemo.lightning.ckpt_utils.ADAPTER_META_FILENAME


class ScriptError(Exception):
    """Bad input (a flag value, a missing path, no NeMo): one ``error:`` line on stderr, exit status 1."""


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
    """One progress line, flushed (the recipes ``tee`` stdout into a log file)."""
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


def offline_defaults() -> None:
    """Never download unless asked: ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` default to 1 (set 0 to allow)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")


def local_only() -> bool:
    """True unless ``HF_HUB_OFFLINE`` is 0/false."""
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False")


def in_hf_cache(repo_id: str, filename: str) -> bool:
    """Whether ``filename`` of the hub repo ``repo_id`` is in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except (ImportError, OSError, ValueError):
        return False


def check_model_source(path: str, flag: str) -> str:
    """A local Hugging Face model directory, or a hub id in the local cache (unless downloads are allowed)."""
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ScriptError(f"{flag}={path}: not a Hugging Face model directory (no config.json in it)")
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
# paths


def model_id_parts(model_id: str) -> list[str]:
    """``Qwen/Qwen3-8B`` -> ``[Qwen, Qwen3-8B]`` (an absolute path becomes relative; ``..`` dropped)."""
    return [p for p in PurePosixPath(model_id).parts if p not in ("/", ".", "..", "")] or ["model"]


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
# local answer metrics (used when BERTScore cannot run offline)


_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")


def words(text: str) -> list[str]:
    """Lower-cased words, punctuation removed."""
    return _PUNCTUATION.sub(" ", text.lower()).split()


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD-style token-overlap F1 (1.0 when both are empty, 0.0 when one is)."""
    pred, ref = words(prediction), words(reference)
    if not pred or not ref:
        return float(pred == ref)
    remaining: dict[str, int] = {}
    for word in ref:
        remaining[word] = remaining.get(word, 0) + 1
    common = 0
    for word in pred:
        if remaining.get(word, 0) > 0:
            remaining[word] -= 1
            common += 1
    if not common:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1: longest common subsequence of the words."""
    pred, ref = words(prediction), words(reference)
    if not pred or not ref:
        return float(pred == ref)
    row = [0] * (len(ref) + 1)
    for p in pred:
        diagonal = 0
        for j, r in enumerate(ref, 1):
            above = row[j]
            row[j] = diagonal + 1 if p == r else max(row[j], row[j - 1])
            diagonal = above
    lcs = row[-1]
    if not lcs:
        return 0.0
    precision, recall = lcs / len(pred), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)


def score(predictions: list[str], references: list[str]) -> tuple[str, dict[str, float]]:
    """(metric, mean scores): BERTScore F1 (as the reference) when it can run, else token F1 and ROUGE-L F1.

    ``MLRECIPE_METRIC=local`` skips BERTScore.
    """
    reason = "MLRECIPE_METRIC=local"
    if os.environ.get("MLRECIPE_METRIC", "").lower() != "local":
        try:
            import evaluate

            result = evaluate.load("bertscore").compute(predictions=predictions, references=references, lang="en")
            f1 = [float(x) for x in result["f1"]]
            return "bertscore", {"bertscore_f1": sum(f1) / len(f1)}
        except Exception as exc:  # noqa: BLE001 - not installed, offline, no weights: fall back
            reason = f"BERTScore unavailable: {short_error(exc)}"
    log(f"note: scoring with local metrics (token-overlap F1 and ROUGE-L F1) instead of BERTScore ({reason})")
    n = max(1, len(predictions))
    pairs = list(zip(predictions, references, strict=True))
    return "local", {"token_f1": sum(token_f1(p, r) for p, r in pairs) / n,
                     "rouge_l_f1": sum(rouge_l_f1(p, r) for p, r in pairs) / n}


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


def add_flags(parser: Any, cls: type, skip: tuple[str, ...] = (), prefix: str = "", none_defaults: bool = False,
              bool_flips: bool = True) -> None:
    """One ``--<prefix><field>`` per field, typed; dicts as a JSON object.

    Booleans: with ``bool_flips`` (families D1 / C) a flag with no value, ``store_true`` when the default is False and
    ``store_false`` when it is True. ``none_defaults``: argparse default None (nested configs: to see which flags
    were given).
    """
    for f, kind in cli_fields(cls, skip):
        default = field_default(f)
        shown = "required" if default is dataclasses.MISSING else default
        flag, hint = f"--{prefix}{f.name}", f"(default: {shown!r})".replace("%", "%%")
        if kind == "bool" and bool_flips:
            flips_to = not bool(default)
            parser.add_argument(flag, dest=f"{prefix}{f.name}", action="store_true" if flips_to else "store_false",
                                default=None if none_defaults else bool(default), help=f"flag: sets {flips_to} {hint}")
            continue
        value = None if none_defaults or default is dataclasses.MISSING else default
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
