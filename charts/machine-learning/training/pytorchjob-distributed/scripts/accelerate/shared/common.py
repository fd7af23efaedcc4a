"""Helpers shared by the ``framework: accelerate`` scripts.

Only the standard library is imported at module level, so that ``--help`` and argument errors are fast;
``torch`` / ``transformers`` are imported inside the functions that need them.

What lives here:

* :class:`ScriptError` and :func:`run_main`: bad input ends a script with one ``error: ...`` line on stderr
  and exit status 1 (argparse errors keep their status 2);
* the three CLI families of the reference scripts: ``D0`` (trainers: dataclass fields, default ``None``,
  flip-the-default booleans, comma lists, nested ``--hfdc_*`` config), ``C`` (converters) and ``T``
  (evaluators: booleans typed ``str``);
* paths: ``$HOME/results/<model id>`` and the latest ``checkpoint-<N>`` rule;
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
from pathlib import Path, PurePosixPath
from typing import Any

DEFAULT_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
CONVERTED_RE = re.compile(r"\.(hf_model|hf_peft|merged)")


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
    """Print one progress line (flushed, so that ``tee`` shows it at once)."""
    print(message, flush=True)


def global_rank() -> int:
    """The global rank of this process (``RANK`` as set by ``accelerate launch`` / torchrun; 0 when unset)."""
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def is_main_process() -> bool:
    """True on global rank 0."""
    return global_rank() == 0


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


def select_precision() -> Precision:
    """bf16 + sdpa where CUDA supports bf16, fp32 weights + fp16 autocast on older GPUs, fp32 + sdpa on CPU.

    ``MLRECIPE_ATTN_IMPLEMENTATION`` (e.g. ``flash_attention_2`` or ``eager``) overrides the attention kernel;
    ``MLRECIPE_FORCE_CPU=1`` (or ``ACCELERATE_USE_CPU=1``) selects the CPU choices even when CUDA is present.
    """
    import torch

    force_cpu = os.environ.get("MLRECIPE_FORCE_CPU", "") in ("1", "true") or \
        os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
    attn = os.environ.get("MLRECIPE_ATTN_IMPLEMENTATION") or "sdpa"
    if torch.cuda.is_available() and not force_cpu:
        if torch.cuda.is_bf16_supported():
            return Precision(torch.bfloat16, attn, bf16=True, fp16=False, device="cuda")
        return Precision(torch.float32, attn, bf16=False, fp16=True, device="cuda")
    return Precision(torch.float32, attn, bf16=False, fp16=False, device="cpu")


def check_model_source(path: str, flag: str) -> str:
    """Validate a model source without downloading: a local model directory, or a hub id already in the cache.

    Returns the path unchanged; raises :class:`ScriptError` naming ``flag`` otherwise.
    """
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ScriptError(f"{flag}={path}: not a model directory (no config.json in it)")
        return str(local)
    if local.exists():
        raise ScriptError(f"{flag}={path}: not a directory")
    looks_like_path = path.startswith(("/", ".", "~")) or path.count("/") != 1
    if looks_like_path:
        raise ScriptError(f"{flag}={path}: no such directory")
    if os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False"):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except Exception:
            cached = None
        if not isinstance(cached, str):
            raise ScriptError(
                f"{flag}={path}: not a local directory and not in the Hugging Face cache "
                "(downloads are off: pass a local model directory, or set HF_HUB_OFFLINE=0)"
            )
    return path


def load_tokenizer(path: str, trust_remote_code: bool = True, padding_side: str = "right",
                   flag: str = "--model_path") -> Any:
    """The tokenizer of ``path`` (never downloads), with the pad token falling back to eos."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                  local_files_only=_local_only())
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a tokenizer ({_short(exc)})") from exc
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
            log(f"attention {attn_implementation} is not available here ({_short(exc)}); using eager")
            return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", **common)
    except ScriptError:
        raise
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a causal LM from it ({_short(exc)})") from exc


def _local_only() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False")


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


def short_error(exc: BaseException) -> str:
    """The exception's type and first line, for a one-line error message."""
    return _short(exc)


# --------------------------------------------------------------------------------------------------------------
# paths


def home_dir() -> Path:
    """``$HOME`` as the reference scripts see it (``Path.home()``)."""
    return Path.home()


def model_id_parts(model_id: str) -> list[str]:
    """Path components of a model id (``Qwen/Qwen3-8B`` -> ``[Qwen, Qwen3-8B]``; an absolute dir made relative)."""
    return [p for p in PurePosixPath(model_id).parts if p not in ("/", ".", "..", "")]


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
    """``Optional[X]`` -> X; other unions -> str."""
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


def _add_field(parser: Any, flag: str, kind: str, default: Any, help_default: Any,
               family: str, extra: dict[str, Any] | None = None) -> None:
    """Add one flag. family: D0 (default None, bool flips the default), C (typed, store_true), T (bool as str).

    ``extra`` (a field's ``metadata["argparse"]``) overrides the ``add_argument`` keywords; its ``help`` is put in
    front of the default hint.
    """
    dest = flag.lstrip("-")
    hint = f"(default: {help_default})".replace("%", "%%")
    if extra:
        extra = dict(extra)
        if "help" in extra:
            hint = f"{extra.pop('help')} {hint}"
        caster = {"int": int, "float": float}.get(kind, str)
        parser.add_argument(flag, **{"dest": dest, "type": caster, "default": default, "help": hint, **extra})
        return
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

    ``family`` is ``D0``, ``C`` or ``T`` (see the module doc); a field's ``metadata={"argparse": {...}}`` overrides
    the keywords of its ``add_argument`` (e.g. ``type``, ``nargs``, ``const``, ``help``). ``nested`` maps a field
    of ``cls`` holding another dataclass (e.g. ``hfdc``) to (that class, fields not on the CLI); its fields become
    ``--<prefix>_<field>``.
    """
    nested = nested or {}
    parser = argparse.ArgumentParser(description=description)  # each flag's help names its default
    for f, tp in _cli_fields(cls):
        if f.name in nested:
            continue
        default = _default_of(f)
        shown = default if default is not dataclasses.MISSING else "required"
        if isinstance(shown, list):
            shown = ",".join(map(str, shown))
        kind = _field_kind(tp)
        extra = f.metadata.get("argparse")
        if family == "D0":
            _add_field(parser, f"--{f.name}", kind, None, shown, family, extra)
        else:
            value = ",".join(map(str, default)) if kind == "list" and isinstance(default, list) else default
            _add_field(parser, f"--{f.name}", kind, value, shown, family, extra)
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
    given (the script's own default for it is then dropped).
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

    ``logging_dir`` (gone in transformers 5) becomes ``TENSORBOARD_LOGGING_DIR``; ``use_liger_kernel`` is dropped
    with a note when liger-kernel is not installed.
    """
    import importlib.util

    from transformers import TrainingArguments

    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    logging_dir = kwargs.pop("logging_dir", None)
    if logging_dir is not None:
        if "logging_dir" in known:
            kwargs["logging_dir"] = logging_dir
        else:
            os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(logging_dir))
    if kwargs.get("use_liger_kernel") and not importlib.util.find_spec("liger_kernel"):
        log("note: --use_liger_kernel given but liger-kernel is not installed; training without it")
        kwargs["use_liger_kernel"] = False
    for old, new in (("gradient_checkpointing", "activation_checkpointing"),
                     ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
        if old in kwargs and new in known:  # renamed in later transformers 5 releases
            kwargs[new] = kwargs.pop(old)
    if "eval_strategy" not in known and "eval_strategy" in kwargs:  # transformers < 4.41
        kwargs["evaluation_strategy"] = kwargs.pop("eval_strategy")
    dropped = sorted(k for k in kwargs if k not in known)
    if dropped:
        log(f"note: this transformers version has no TrainingArguments {dropped}; ignored")
    return TrainingArguments(**{k: v for k, v in kwargs.items() if k in known})


def save_final_model(trainer: Any, tokenizer: Any, final: Path) -> None:
    """``trainer.save_model(final)`` plus the tokenizer, with real weights also under FSDP ``SHARDED_STATE_DICT``.

    With a sharded state dict the Trainer's ``save_model`` writes no weights, so the plugin is switched to
    ``FULL_STATE_DICT`` for this last save (gathered on rank 0). Called on every rank.
    """
    plugin = getattr(getattr(trainer, "accelerator", None), "state", None)
    plugin = getattr(plugin, "fsdp_plugin", None)
    if getattr(trainer, "is_fsdp_enabled", False) and plugin is not None and \
            "FULL_STATE_DICT" not in str(plugin.state_dict_type) and hasattr(plugin, "set_state_dict_type"):
        plugin.set_state_dict_type("FULL_STATE_DICT")
        log("saving final/ with a full state dict (the checkpoints keep the sharded one)")
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(final))


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


def load_pretrained(path: str, flag: str, auto_class: str = "AutoModelForCausalLM", dtype: Any = "auto",
                    attn_implementation: str | None = "sdpa", trust_remote_code: bool = True,
                    device_map: Any = None, **kwargs: Any) -> Any:
    """``transformers.<auto_class>.from_pretrained`` that never downloads and reports failures as :class:`ScriptError`
    naming ``flag`` (an attention implementation the model lacks falls back to ``eager``)."""
    import transformers

    cls = getattr(transformers, auto_class)
    common = dict(dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=_local_only(), **kwargs)
    if device_map is not None:
        common["device_map"] = device_map
    try:
        try:
            return cls.from_pretrained(path, attn_implementation=attn_implementation, **common)
        except (ValueError, ImportError) as exc:
            if attn_implementation in (None, "eager") or "attn" not in str(exc).lower():
                raise
            log(f"attention {attn_implementation} is not available here ({_short(exc)}); using eager")
            return cls.from_pretrained(path, attn_implementation="eager", **common)
    except ScriptError:
        raise
    except Exception as exc:
        kind = auto_class.replace("AutoModelFor", "").replace("AutoModel", "model") or "model"
        raise ScriptError(f"{flag}={path}: cannot load a {kind} model from it ({_short(exc)})") from exc


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
        raise ScriptError(f"{flag}={path}: cannot apply the adapter to {base} ({_short(exc)})") from exc
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
