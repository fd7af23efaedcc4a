"""The part of ``shared/common.py`` that the accelerate and the ray_train scripts share.

One file for both trees: the accelerate tree has it here; the ray_train tree links ``shared/common_base.py`` to it.
Each tree's ``shared/common.py`` imports what it uses from here and adds its own paths and checkpoint rules, so the
scripts keep importing everything from ``shared.common``.

Only the standard library is imported at module level, so that ``--help`` and argument errors are fast;
``torch`` / ``transformers`` are imported inside the functions that need them.

What lives here:

* from ``shared/script_core.py`` (the file all four framework trees share): :class:`ScriptError` and
  :func:`run_main` (bad input ends a script with one ``error: ...`` line on stderr and exit status 1; argparse
  errors keep their status 2), :func:`offline_defaults`, :func:`atomic_file`;
* the three CLI families of the reference scripts: ``D0`` (trainers: dataclass fields, default ``None``,
  flip-the-default booleans, comma lists, nested ``--hfdc_*`` config), ``C`` (converters) and ``T``
  (evaluators: booleans typed ``str``);
* offline defaults, device-dependent precision / attention, model and tokenizer loading that never downloads;
* :func:`atomic_dir` / :func:`atomic_file`: write to a temporary sibling, then rename;
* Trainer plumbing: :func:`report_to`, :func:`training_arguments`, :func:`count_parameters`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from mlrecipe_scripts.core.script_core import (
    ScriptError,
    atomic_dir,
    atomic_file,
    field_default,
    log,
    offline_defaults,
    run_main,
    short_error,
)
from mlrecipe_scripts.core.script_core import local_only as _local_only

__all__ = [
    "DEFAULT_LORA_TARGETS",
    "ConvertArguments",
    "Precision",
    "ScriptError",
    "atomic_dir",
    "atomic_file",
    "build_from_namespace",
    "check_model_source",
    "comma_list",
    "count_parameters",
    "dataclass_parser",
    "force_cpu",
    "global_rank",
    "home_dir",
    "is_main_process",
    "load_causal_lm",
    "load_pretrained",
    "load_tokenizer",
    "log",
    "model_id_parts",
    "offline_defaults",
    "report_to",
    "run_main",
    "save_final_model",
    "select_precision",
    "short_error",
    "step_training_arguments",
    "training_arguments",
    "truthy_str",
]

DEFAULT_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


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
    """bf16 + sdpa where CUDA supports bf16, fp32 weights + fp16 autocast on older GPUs, fp32 + sdpa on CPU.

    ``use_gpu=None`` means "CUDA if available", unless ``MLRECIPE_FORCE_CPU=1`` (or ``ACCELERATE_USE_CPU=1``)
    selects the CPU choices even when CUDA is present. ``MLRECIPE_ATTN_IMPLEMENTATION`` (e.g. ``flash_attention_2``
    or ``eager``) overrides the attention kernel.
    """
    import torch

    if use_gpu is None:
        use_gpu = torch.cuda.is_available() and not force_cpu() and \
            os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("1", "true", "yes")
    attn = os.environ.get("MLRECIPE_ATTN_IMPLEMENTATION") or "sdpa"
    if use_gpu:
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
    if _local_only():
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
        raise ScriptError(f"{flag}={path}: cannot load a tokenizer ({short_error(exc)})") from exc
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ScriptError(f"{flag}={path}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def model_class(path: str, trust_remote_code: bool = True) -> Any:
    """The auto class for the model at ``path``: ``AutoModelForImageTextToText`` for a vision-language model (its
    config has a ``vision_config``: Qwen2.5-VL, Qwen3-VL ...), else ``AutoModelForCausalLM``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=_local_only())
    except Exception:  # reported by from_pretrained itself, with the same path
        return AutoModelForCausalLM
    if getattr(config, "vision_config", None) is None:
        return AutoModelForCausalLM
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText


def load_causal_lm(path: str, flag: str, dtype: Any = "auto", attn_implementation: str | None = "sdpa",
                   trust_remote_code: bool = True, device_map: Any = None, **kwargs: Any) -> Any:
    """``from_pretrained`` of :func:`model_class` (a causal LM, or a vision-language model) that never downloads
    and reports failures as :class:`ScriptError`.

    An attention implementation the model does not support falls back to ``eager``.
    """
    auto = model_class(path, trust_remote_code)
    common = dict(dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=_local_only(), **kwargs)
    if device_map is not None:
        common["device_map"] = device_map
    try:
        try:
            return auto.from_pretrained(path, attn_implementation=attn_implementation, **common)
        except (ValueError, ImportError) as exc:
            if attn_implementation in (None, "eager") or "attn" not in str(exc).lower():
                raise
            log(f"attention {attn_implementation} is not available here ({short_error(exc)}); using eager")
            return auto.from_pretrained(path, attn_implementation="eager", **common)
    except ScriptError:
        raise
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a causal LM from it ({short_error(exc)})") from exc


# --------------------------------------------------------------------------------------------------------------
# paths, atomic writes


def home_dir() -> Path:
    """``$HOME`` as the reference scripts see it (``Path.home()``)."""
    return Path.home()


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


def _add_field(parser: Any, flag: str, kind: str, default: Any, help_default: Any,
               family: str, extra: dict[str, Any] | None = None, doc: str = "") -> None:
    """Add one flag. family: D0 (default None, bool flips the default), C (typed, store_true), T (bool as str).

    ``extra`` (a field's ``metadata["argparse"]``) overrides the ``add_argument`` keywords; its ``help`` is put in
    front of the default hint. ``doc`` (a field's ``metadata["help"]``) is put in front of the hint too.
    """
    dest = flag.lstrip("-")
    hint = (f"{doc} " if doc else "") + f"(default: {help_default})".replace("%", "%%")
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


def _cli_fields(cls: type, skip: tuple[str, ...] = ()) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.name not in skip and f.init]


def dataclass_parser(cls: type, family: str, description: str | None = None,
                     nested: Mapping[str, tuple[type, tuple[str, ...]]] | None = None) -> argparse.ArgumentParser:
    """An argparse parser with one ``--<field>`` per field of the dataclass ``cls``.

    ``family`` is ``D0``, ``C`` or ``T`` (see the module doc); a field's ``metadata={"argparse": {...}}`` overrides
    the keywords of its ``add_argument`` (e.g. ``type``, ``nargs``, ``const``, ``help``) and its ``metadata["help"]``
    is shown in ``--help``. ``nested`` maps a field of ``cls`` holding another dataclass (e.g. ``hfdc``) to (that
    class, fields not on the CLI); its fields become ``--<prefix>_<field>``.
    """
    nested = nested or {}
    parser = argparse.ArgumentParser(description=description)  # each flag's help names its default
    for f, tp in _cli_fields(cls):
        if f.name in nested:
            continue
        default = field_default(f)
        shown = default if default is not dataclasses.MISSING else "required"
        if isinstance(shown, list):
            shown = ",".join(map(str, shown))
        kind = _field_kind(tp)
        extra, doc = f.metadata.get("argparse"), f.metadata.get("help", "")
        if family == "D0":
            _add_field(parser, f"--{f.name}", kind, None, shown, family, extra, doc)
        else:
            value = ",".join(map(str, default)) if kind == "list" and isinstance(default, list) else default
            _add_field(parser, f"--{f.name}", kind, value, shown, family, extra, doc)
    for prefix, (sub_cls, skip) in nested.items():
        group = parser.add_argument_group(f"--{prefix}_* ({sub_cls.__name__}; any of them rebuilds it from the "
                                          "class defaults, so --%s_dataset_name is then required)" % prefix)
        for f, tp in _cli_fields(sub_cls, skip):
            default = field_default(f)
            shown = "required" if default is dataclasses.MISSING else default
            _add_field(group, f"--{prefix}_{f.name}", _field_kind(tp), None, repr(shown), "D0")
    return parser


def build_from_namespace(cls: type, ns: argparse.Namespace, parser: argparse.ArgumentParser,
                         nested: Mapping[str, tuple[type, tuple[str, ...]]] | None = None) -> Any:
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
                   if field_default(f) is dataclasses.MISSING and f.name not in given]
        if missing:
            parser.error(f"--{prefix}_{missing[0]} is required when any --{prefix}_* flag is given "
                         f"(the {sub_cls.__name__} is then rebuilt from its class defaults)")
        values[prefix] = sub_cls(**given)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))


@dataclasses.dataclass
class ConvertArguments:
    """The converters' flags, the same in both trees (``shared/convert_checkpoint_to_hf.py``; family C: typed,
    ``store_true`` booleans, comma-list string)."""

    model_path: str | None = None
    base_model: str = "Qwen/Qwen3-8B"
    checkpoints_dir: str | None = None
    full_ft: bool = False
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: str = DEFAULT_LORA_TARGETS
    no_merge: bool = False


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


def step_training_arguments(args: Any, output_dir: Path, precision: Precision, evaluate: bool,
                            **kwargs: Any) -> Any:
    """:func:`training_arguments` with what the step-based trainers (SFT, reward model, VLM SFT) share, read from
    their flags of the same names: ``--max_steps``, the batch sizes, the optimizer's, ``--logging_steps``, ``--seed``,
    ``--num_workers``, ``--use_wandb``; logs under ``output_dir/logs``; ``precision``. With validation rows
    (``evaluate``) an evaluation every ``--eval_steps`` (``SaveOnBestMetricCallback`` saves the best), without them
    a checkpoint every ``--eval_steps``, two kept. ``kwargs`` add to these or replace them."""
    shared: dict[str, Any] = {
        "output_dir": str(output_dir),
        "logging_dir": str(output_dir / "logs"),
        "max_steps": args.max_steps,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "per_device_eval_batch_size": args.per_device_eval_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "learning_rate": args.learning_rate,
        "weight_decay": args.weight_decay,
        "warmup_steps": args.warmup_steps,
        "max_grad_norm": args.max_grad_norm,
        "logging_steps": args.logging_steps,
        "eval_strategy": "steps" if evaluate else "no",
        "eval_steps": args.eval_steps,
        "save_strategy": "no" if evaluate else "steps",
        "save_steps": args.eval_steps,
        "save_total_limit": 2,
        "metric_for_best_model": "eval_loss" if evaluate else None,
        "greater_is_better": False,
        "bf16": precision.bf16,
        "fp16": precision.fp16,
        "use_cpu": precision.device == "cpu",
        "report_to": report_to(args.use_wandb),
        "seed": args.seed,
        "dataloader_num_workers": args.num_workers,
        "remove_unused_columns": False,
        "ddp_find_unused_parameters": False,
    }
    return training_arguments(**{**shared, **kwargs})


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


def count_parameters(model: Any) -> str:
    """``trainable X / total Y (Z%)``."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"trainable {trainable:,} / total {total:,} ({100 * trainable / max(total, 1):.2f}%)"


def model_id_parts(model_id: str) -> list[str]:
    """Path components of a model id (``Qwen/Qwen3-8B`` -> ``[Qwen, Qwen3-8B]``; an absolute dir made relative)."""
    return [p for p in PurePosixPath(model_id).parts if p not in ("/", ".", "..", "")]


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
            log(f"attention {attn_implementation} is not available here ({short_error(exc)}); using eager")
            return cls.from_pretrained(path, attn_implementation="eager", **common)
    except ScriptError:
        raise
    except Exception as exc:
        kind = auto_class.replace("AutoModelFor", "").replace("AutoModel", "model") or "model"
        raise ScriptError(f"{flag}={path}: cannot load a {kind} model from it ({short_error(exc)})") from exc
