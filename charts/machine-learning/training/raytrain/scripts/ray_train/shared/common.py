"""Helpers shared by the ``framework: ray_train`` scripts.

Only the standard library is imported at module level, so that ``--help`` and argument errors are fast;
``torch`` / ``transformers`` / ``ray`` are imported inside the functions that need them.

What lives here:

* :class:`ScriptError` and :func:`run_main`: bad input ends a script with one ``error: ...`` line on stderr
  and exit status 1 (argparse errors keep their status 2);
* the CLI families of the reference scripts: ``D0`` (trainers: dataclass fields, default ``None``,
  flip-the-default booleans, nested ``--hfdc_*`` config), ``C`` (converter) and ``T`` (evaluator: booleans
  typed ``str``);
* paths: ``--results_dir`` joined to ``$HOME``, the Ray run name and the newest-checkpoint rule
  (``TorchTrainer_*`` / ``checkpoint_*`` by modification time, then ``checkpoint/``);
* offline defaults, device-dependent precision / attention, model and tokenizer loading that never downloads;
* :func:`atomic_dir` / :func:`atomic_file`: write to a temporary sibling, then rename.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

DEFAULT_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
CONVERTED_RE = re.compile(r"\.(hf_model|hf_peft|merged)$")
HF_CHECKPOINT_SUBDIR = "checkpoint"  # what Ray Train's Hugging Face report callback names the HF dir


class ScriptError(Exception):
    """Bad input (a flag value, a missing path): reported as one ``error:`` line on stderr, exit status 1."""


def run_main(main: Callable[[], int | None]) -> None:
    """Run ``main`` and turn a :class:`ScriptError` into one stderr line and exit status 1."""
    try:
        code = main()
    except ScriptError as exc:
        sys.stdout.flush()
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(code or 0)


def log(message: str) -> None:
    """Write one progress line to stdout, flushed (so that ``tee`` shows it at once).

    ``sys.stdout.write`` rather than ``print``: Ray Train workers patch ``print`` into a logger that would show
    the line twice in the driver's log.
    """
    sys.stdout.write(f"{message}\n")
    sys.stdout.flush()


def short_error(exc: BaseException) -> str:
    """The exception's type and first line, for a one-line error message."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


# --------------------------------------------------------------------------------------------------------------
# offline behaviour, precision, loading


def offline_defaults() -> None:
    """Never download: default ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` to 1 (set them to 0 to allow it).

    Must run before ``huggingface_hub`` is imported (it reads the variables once).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")


def _local_only() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False")


def force_cpu() -> bool:
    """``MLRECIPE_FORCE_CPU=1`` selects the CPU choices even where CUDA is present."""
    return os.environ.get("MLRECIPE_FORCE_CPU", "").lower() in ("1", "true", "yes")


@dataclasses.dataclass
class Precision:
    """How to load and train a model on this machine."""

    dtype: Any  # torch.dtype
    attn_implementation: str
    bf16: bool
    fp16: bool
    device: str

    def describe(self) -> str:
        """One line for the log."""
        amp = "bf16" if self.bf16 else "fp16 autocast" if self.fp16 else "no autocast"
        return f"device {self.device}, weights {str(self.dtype).replace('torch.', '')}, {amp}, " \
               f"attention {self.attn_implementation}"


def select_precision(use_gpu: bool | None = None) -> Precision:
    """bf16 where CUDA supports it (fp32 weights + fp16 autocast on older GPUs), fp32 on CPU; attention sdpa.

    ``use_gpu=None`` means "CUDA if available". ``MLRECIPE_ATTN_IMPLEMENTATION`` (``flash_attention_2``,
    ``eager`` ...) overrides the attention kernel.
    """
    import torch

    if use_gpu is None:
        use_gpu = torch.cuda.is_available() and not force_cpu()
    attn = os.environ.get("MLRECIPE_ATTN_IMPLEMENTATION") or "sdpa"
    if use_gpu:
        if torch.cuda.is_bf16_supported():
            return Precision(torch.bfloat16, attn, bf16=True, fp16=False, device="cuda")
        return Precision(torch.float32, attn, bf16=False, fp16=True, device="cuda")
    return Precision(torch.float32, attn, bf16=False, fp16=False, device="cpu")


def check_model_source(path: str, flag: str) -> str:
    """Validate a model source without downloading: a local model directory, or a hub id already in the cache."""
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ScriptError(f"{flag}={path}: not a model directory (no config.json in it)")
        return str(local)
    if local.exists():
        raise ScriptError(f"{flag}={path}: not a directory")
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise ScriptError(f"{flag}={path}: no such directory")
    if _local_only():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except Exception:  # noqa: BLE001 - a cache lookup that fails means "not cached"
            cached = None
        if not isinstance(cached, str):
            raise ScriptError(f"{flag}={path}: not a local directory and not in the Hugging Face cache "
                              "(downloads are off: pass a local model directory, or set HF_HUB_OFFLINE=0)")
    return path


def load_tokenizer(path: str, trust_remote_code: bool = True, padding_side: str = "right",
                   flag: str = "--model_path") -> Any:
    """The tokenizer of ``path`` (never downloads), with the pad token falling back to eos."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                  local_files_only=_local_only())
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a tokenizer ({short_error(exc)})") from exc
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ScriptError(f"{flag}={path}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, flag: str, dtype: Any = "auto", attn_implementation: str | None = "sdpa",
                   trust_remote_code: bool = True, device_map: Any = None, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` that never downloads and reports failures as :class:`ScriptError`.

    An attention implementation the model does not support falls back to ``eager``.
    """
    from transformers import AutoModelForCausalLM

    common = dict(dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=_local_only(), **kwargs)
    if device_map is not None:
        common["device_map"] = device_map
    try:
        try:
            return AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn_implementation, **common)
        except (ValueError, ImportError) as exc:
            if attn_implementation in (None, "eager") or "attn" not in str(exc).lower():
                raise
            log(f"attention {attn_implementation} is not available here ({short_error(exc)}); using eager")
            return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", **common)
    except ScriptError:
        raise
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a causal LM from it ({short_error(exc)})") from exc


# --------------------------------------------------------------------------------------------------------------
# paths


def home_dir() -> Path:
    """``$HOME`` as the reference scripts see it (``Path.home()``)."""
    return Path.home()


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


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling of ``final``; on success it replaces ``final``, on failure it is removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
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
# CLI families


def comma_list(value: str | list[str] | None) -> list[str]:
    """``"q_proj, k_proj"`` -> ``["q_proj", "k_proj"]`` (items stripped, empty items dropped)."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [item.strip() for item in str(value).split(",") if item.strip()]


def truthy_str(value: Any) -> bool:
    """Family T booleans: any non-empty string is True (so ``--full_ft=False`` is True, as in the reference)."""
    return bool(value)


def _base_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return tp


def _field_kind(tp: Any) -> str:
    base = _base_type(tp)
    origin = typing.get_origin(base) or base
    if base is bool:
        return "bool"
    if base in (int, float, str):
        return base.__name__
    if origin in (list, tuple):
        return "list"
    if origin is dict:
        return "json"
    return "str"


def _json_object(flag: str) -> Callable[[str], dict | None]:
    def parse(text: str) -> dict | None:
        if text.strip() in ("", "None", "null"):
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a JSON object: {exc}") from exc
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError("not a JSON object")
        return value

    parse.__name__ = f"JSON object for {flag}"
    return parse


def _add_field(parser: Any, flag: str, kind: str, default: Any, help_default: Any, family: str,
               doc: str = "") -> None:
    """Add one flag. family: D0 (default None, bool flips the default), C (typed, store_true), T (bool as str)."""
    dest = flag.lstrip("-")
    hint = (f"{doc} " if doc else "") + f"(default: {help_default})".replace("%", "%%")
    if kind == "bool":
        if family == "T":
            parser.add_argument(flag, dest=dest, type=str, default=default,
                                help=f"any non-empty value means true {hint}")
        elif family == "D0":
            action = "store_false" if help_default is True else "store_true"
            parser.add_argument(flag, dest=dest, action=action, default=None,
                                help=f"flag: sets {'False' if help_default is True else 'True'} {hint}")
        else:
            parser.add_argument(flag, dest=dest, action="store_true", default=bool(default), help=f"flag {hint}")
        return
    if kind == "list":
        parser.add_argument(flag, dest=dest, type=str, default=default, help=f"comma-separated list {hint}")
    elif kind == "json":
        parser.add_argument(flag, dest=dest, type=_json_object(flag), default=default, help=f"JSON object {hint}")
    else:
        caster = {"int": int, "float": float}.get(kind, str)
        parser.add_argument(flag, dest=dest, type=caster, default=default, help=hint)


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _cli_fields(cls: type, skip: tuple[str, ...] = ()) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.name not in skip and f.init]


def dataclass_parser(cls: type, family: str, description: str | None = None,
                     nested: dict[str, tuple[type, tuple[str, ...]]] | None = None) -> argparse.ArgumentParser:
    """An argparse parser with one ``--<field>`` per field of the dataclass ``cls``.

    ``family`` is ``D0``, ``C`` or ``T`` (see the module doc). ``nested`` maps a field of ``cls`` holding another
    dataclass (``hfdc``) to (that class, fields not on the CLI); its fields become ``--<prefix>_<field>``.
    A field's ``metadata["help"]`` is shown in ``--help``.
    """
    nested = nested or {}
    parser = argparse.ArgumentParser(description=description)
    for f, tp in _cli_fields(cls):
        if f.name in nested:
            continue
        default = _default_of(f)
        shown = default if default is not dataclasses.MISSING else "required"
        if isinstance(shown, list):
            shown = ",".join(map(str, shown))
        kind = _field_kind(tp)
        doc = f.metadata.get("help", "")
        if family == "D0":
            _add_field(parser, f"--{f.name}", kind, None, shown, family, doc)
        else:
            value = ",".join(map(str, default)) if kind == "list" and isinstance(default, list) else default
            _add_field(parser, f"--{f.name}", kind, value, shown, family, doc)
    for prefix, (sub_cls, skip) in nested.items():
        group = parser.add_argument_group(f"--{prefix}_* ({sub_cls.__name__}; any of them rebuilds it from the "
                                          "class defaults, so --%s_dataset_name is then required)" % prefix)
        for f, tp in _cli_fields(sub_cls, skip):
            default = _default_of(f)
            shown = "required" if default is dataclasses.MISSING else default
            _add_field(group, f"--{prefix}_{f.name}", _field_kind(tp), None, repr(shown), "D0")
    return parser


def build_from_namespace(cls: type, ns: argparse.Namespace, parser: argparse.ArgumentParser,
                         nested: dict[str, tuple[type, tuple[str, ...]]] | None = None) -> Any:
    """The D0 rule: start from the dataclass defaults and override only the flags that were given.

    A nested config is rebuilt from its class defaults plus the given ``--<prefix>_*`` flags when any of them is
    given (the script's own default for it is then dropped, so its required fields must be given).
    """
    nested = nested or {}
    values: dict[str, Any] = {}
    for f, tp in _cli_fields(cls):
        if f.name in nested:
            continue
        value = getattr(ns, f.name, None)
        if value is None:
            continue
        if _field_kind(tp) == "list":
            value = comma_list(value)
        values[f.name] = value
    for prefix, (sub_cls, skip) in nested.items():
        given = {f.name: getattr(ns, f"{prefix}_{f.name}") for f, _ in _cli_fields(sub_cls, skip)
                 if getattr(ns, f"{prefix}_{f.name}", None) is not None}
        if not given:
            continue
        missing = [f.name for f, _ in _cli_fields(sub_cls, skip)
                   if _default_of(f) is dataclasses.MISSING and f.name not in given]
        if missing:
            parser.error(f"--{prefix}_{missing[0]} is required when any --{prefix}_* flag is given "
                         f"(the {sub_cls.__name__} is then rebuilt from its class defaults)")
        values[prefix] = sub_cls(**given)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))


# --------------------------------------------------------------------------------------------------------------
# Trainer plumbing (transformers imported inside)


def report_to(use_wandb: bool) -> list[str]:
    """``["tensorboard"]`` when TensorBoard is installed (plus ``"wandb"`` with ``--use_wandb``)."""
    import importlib.util

    targets = []
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        targets.append("tensorboard")
    else:
        log("note: tensorboard is not installed; no TensorBoard logs are written")
    if use_wandb:
        if not importlib.util.find_spec("wandb"):
            raise ScriptError("--use_wandb: the wandb package is not installed")
        targets.append("wandb")
    return targets


def training_arguments(**kwargs: Any) -> Any:
    """``transformers.TrainingArguments`` from the keyword arguments this transformers version knows.

    ``logging_dir`` (gone in transformers 5) becomes ``TENSORBOARD_LOGGING_DIR``; ``warmup_ratio`` (gone in
    transformers 5) becomes a fractional ``warmup_steps``; ``use_liger_kernel`` is dropped with a note when
    liger-kernel is not installed.
    """
    import importlib.util

    from transformers import TrainingArguments

    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    logging_dir = kwargs.pop("logging_dir", None)
    if logging_dir is not None:
        if "logging_dir" in known:
            kwargs["logging_dir"] = logging_dir
        else:
            os.environ["TENSORBOARD_LOGGING_DIR"] = str(logging_dir)
    if "warmup_ratio" in kwargs and "warmup_ratio" not in known:
        ratio = kwargs.pop("warmup_ratio")
        if ratio and 0 < ratio < 1:
            kwargs["warmup_steps"] = float(ratio)
    if kwargs.get("use_liger_kernel") and not importlib.util.find_spec("liger_kernel"):
        log("note: --use_liger_kernel given but liger-kernel is not installed; training without it")
        kwargs["use_liger_kernel"] = False
    for old, new in (("gradient_checkpointing", "activation_checkpointing"),
                     ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
        if old in kwargs and new in known:  # the new name where this transformers version has it
            kwargs[new] = kwargs.pop(old)
    if "eval_strategy" not in known and "eval_strategy" in kwargs:  # transformers < 4.41
        kwargs["evaluation_strategy"] = kwargs.pop("eval_strategy")
    dropped = sorted(k for k in kwargs if k not in known)
    if dropped:
        log(f"note: this transformers version has no TrainingArguments {dropped}; ignored")
    return TrainingArguments(**{k: v for k, v in kwargs.items() if k in known})


def count_parameters(model: Any) -> str:
    """``trainable X / total Y (Z%)``."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"trainable {trainable:,} / total {total:,} ({100 * trainable / max(total, 1):.2f}%)"
