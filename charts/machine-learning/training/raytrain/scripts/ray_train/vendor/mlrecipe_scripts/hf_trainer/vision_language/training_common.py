"""What the VLM trainers (``peft_accelerate.py``, ``cpt_accelerate.py``) share: their flags (family H, hand-written
argparse), path defaults, data preparation, adapter / model / processor loading and the datasets.

Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.hf_trainer.common_base import ScriptError, check_model_source, home_dir, log, short_error
from mlrecipe_scripts.hf_trainer.vision_language.adapters.registry import get_adapter_for_model
from mlrecipe_scripts.hf_trainer.vision_language.vlm_dataset import (
    READY_MARKER,
    SPLIT_FILES,
    VLMDatasetConfig,
    default_data_dir,
    prepare_vlm_datasets,
    read_vlm_jsonl,
)

DEFAULT_MODEL_ID = "Qwen/Qwen3-VL-8B-Instruct"


def local_files_only() -> bool:
    """True unless ``HF_HUB_OFFLINE`` is set to 0 / false (then hub downloads are allowed)."""
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False")


@dataclass(frozen=True)
class Kind:
    """Differences between the SFT and CPT scripts' flags and paths."""

    name: str  # "sft" | "cpt"
    freeze_vision_default: bool
    train_split_ratio: float
    data_fallback: str
    data_decimals: int
    output_suffix: str
    warmup_steps: int
    max_seq_length: int
    eval_steps: int
    max_eval_samples: int | None


SFT = Kind("sft", True, 0.9, "visual_instruct", 0, "", 100, 8192, 100, 640)
CPT = Kind("cpt", False, 0.99, "visual_cpt", 2, "-cpt", 1000, 4096, 1000, None)


@dataclass
class VLMParser:
    """The parser of a VLM script and the argument groups a variant adds its own flags to."""

    parser: argparse.ArgumentParser
    training: Any
    paths: Any


def build_vlm_parser(description: str, kind: Kind, output_dir: bool = True) -> VLMParser:
    """The flags of the SFT (with LoRA) or CPT script of ``kind`` (``--output_dir`` unless ``output_dir`` is False)."""
    parser = argparse.ArgumentParser(description=description)
    add_model_flags(parser, kind)
    if kind.name == "sft":
        add_lora_flags(parser)
    training = add_training_flags(parser, kind)
    paths = add_dataset_flags(parser, kind, output_dir)
    add_run_flags(parser, kind.max_eval_samples)
    parser.add_argument("--eval_steps", type=int, default=kind.eval_steps)
    return VLMParser(parser, training, paths)


def parse_checked(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse (strict: an unknown flag exits with status 2) and sanity-check the numbers."""
    args = parser.parse_args(argv)
    check_numbers(args, parser)
    return args


def add_model_flags(parser: argparse.ArgumentParser, kind: Kind) -> None:
    """``--model_id``, ``--model_path``, ``--trust_remote_code``, ``--(no_)freeze_vision_encoder``."""
    group = parser.add_argument_group("model")
    group.add_argument("--model_id", type=str, default=DEFAULT_MODEL_ID,
                       help="hub id; names the default output dir (default: %(default)s)")
    group.add_argument("--model_path", type=str, default=None,
                       help="where to load the model from: a local model dir or a cached hub id (default: --model_id)")
    group.add_argument("--trust_remote_code", action="store_true", default=True,
                       help="accepted for compatibility; always on")
    group.add_argument("--freeze_vision_encoder", dest="freeze_vision_encoder", action="store_true",
                       default=kind.freeze_vision_default,
                       help=f"freeze the vision tower (default: {kind.freeze_vision_default})")
    group.add_argument("--no_freeze_vision_encoder", dest="freeze_vision_encoder", action="store_false",
                       help="train the vision tower too")


def add_lora_flags(parser: argparse.ArgumentParser) -> None:
    """``--full_ft`` and the ``--lora_*`` flags of the SFT scripts."""
    lora = parser.add_argument_group("LoRA")
    lora.add_argument("--full_ft", action="store_true", default=False, help="train all parameters (no LoRA)")
    lora.add_argument("--lora_rank", type=int, default=64)
    lora.add_argument("--lora_alpha", type=int, default=16)
    lora.add_argument("--lora_dropout", type=float, default=0.1)
    lora.add_argument("--lora_on_vision", action="store_true", default=False,
                      help="also put LoRA on the vision blocks (attention and MLP)")


def add_training_flags(parser: argparse.ArgumentParser, kind: Kind) -> Any:
    """The training flags: step based with early stopping (SFT) or epoch based with rotating saves (CPT); returns the
    "training" argument group."""
    train = parser.add_argument_group("training")
    if kind.name == "sft":
        train.add_argument("--max_steps", type=int, default=10000)
    else:
        train.add_argument("--num_train_epochs", type=int, default=3)
    train.add_argument("--per_device_train_batch_size", type=int, default=1)
    train.add_argument("--per_device_eval_batch_size", type=int, default=1)
    train.add_argument("--gradient_accumulation_steps", type=int, default=16)
    train.add_argument("--learning_rate", type=float, default=2e-5)
    train.add_argument("--weight_decay", type=float, default=0.01)
    train.add_argument("--warmup_steps", type=int, default=kind.warmup_steps)
    train.add_argument("--max_grad_norm", type=float, default=1.0)
    train.add_argument("--max_seq_length", type=int, default=kind.max_seq_length)
    if kind.name == "sft":
        train.add_argument("--early_stopping_patience", type=int, default=3)
        train.add_argument("--early_stopping_threshold", type=float, default=0.001)
    else:
        train.add_argument("--resume_from_checkpoint", type=str, default=None, help="a checkpoint-<step> directory")
        train.add_argument("--save_steps", type=int, default=1000)
        train.add_argument("--save_total_limit", type=int, default=2)
    return train


def add_dataset_flags(parser: argparse.ArgumentParser, kind: Kind, output_dir: bool = True) -> Any:
    """``--data_dir``, ``--output_dir`` (unless ``output_dir`` is False) and the ``--hf_*`` dataset flags; returns
    the "paths" argument group."""
    paths = parser.add_argument_group("paths")
    paths.add_argument("--data_dir", type=str, default=None,
                       help="holds training.jsonl / validation.jsonl (default: derived from --hf_dataset_name, else "
                            f"$HOME/datasets/{kind.data_fallback})")
    if output_dir:
        paths.add_argument("--output_dir", type=str, default=None,
                           help=f"default: $HOME/results/<model_id>{kind.output_suffix}")
    data = parser.add_argument_group("dataset (prepared into --data_dir on global rank 0)")
    data.add_argument("--hf_dataset_name", type=str, default=None,
                      help="hub dataset id or local directory; without it --data_dir is read as it is")
    data.add_argument("--hf_dataset_config", type=str, default=None)
    data.add_argument("--hf_split", type=str, default="train")
    data.add_argument("--hf_max_samples", type=int, default=None, help="use only the first N rows")
    data.add_argument("--hf_train_split_ratio", type=float, default=kind.train_split_ratio)
    data.add_argument("--hf_val_test_split_ratio", type=float, default=0.5,
                      help="test share of the held-out rows (default: %(default)s)")
    data.add_argument("--hf_image_field", type=str, default="image")
    data.add_argument("--hf_conversations_field", type=str, default="conversations")
    data.add_argument("--hf_download_images", action="store_true", default=True,
                      help="save PIL images and download image URLs into --data_dir (always on)")
    data.add_argument("--hf_num_proc", type=int, default=8)
    return paths


def add_run_flags(parser: argparse.ArgumentParser, max_eval_samples: int | None) -> None:
    """Logging and other flags common to both scripts, plus ``--list_models``."""
    group = parser.add_argument_group("logging and other")
    group.add_argument("--logging_steps", type=int, default=10)
    group.add_argument("--max_eval_samples", type=int, default=max_eval_samples)
    group.add_argument("--use_wandb", action="store_true", default=False)
    group.add_argument("--seed", type=int, default=42)
    group.add_argument("--num_workers", type=int, default=4, help="DataLoader workers (default: %(default)s)")
    group.add_argument("--list_models", action="store_true", help="print the supported models and exit")


def check_numbers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """argparse-style errors (status 2) for values that can never work."""
    positive = ["per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                "max_seq_length", "logging_steps", "eval_steps", "save_steps", "lora_rank", "num_train_epochs"]
    for name in positive:
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            parser.error(f"--{name}={value}: must be positive")
    if getattr(args, "max_steps", None) is not None and args.max_steps <= 0:
        parser.error(f"--max_steps={args.max_steps}: must be positive")
    if not 0 < args.hf_train_split_ratio < 1:
        parser.error(f"--hf_train_split_ratio={args.hf_train_split_ratio}: must be between 0 and 1 (exclusive)")


# --------------------------------------------------------------------------------------------------------------
# paths and data


def dataset_config(args: argparse.Namespace) -> VLMDatasetConfig | None:
    """The :class:`VLMDatasetConfig` of the ``--hf_*`` flags (None without ``--hf_dataset_name``)."""
    if not args.hf_dataset_name:
        return None
    return VLMDatasetConfig(
        dataset_name=args.hf_dataset_name, dataset_config=args.hf_dataset_config, split=args.hf_split,
        max_samples=args.hf_max_samples, train_split_ratio=args.hf_train_split_ratio,
        val_test_split_ratio=args.hf_val_test_split_ratio, image_field=args.hf_image_field,
        conversations_field=args.hf_conversations_field, download_images=args.hf_download_images,
        num_proc=args.hf_num_proc)


def resolve_data_dir(args: argparse.Namespace, kind: Kind) -> Path:
    """``--data_dir``, else the default of the spec (derived from ``--hf_dataset_name``, else the fallback)."""
    if args.data_dir:
        return Path(args.data_dir).expanduser()
    return default_data_dir(dataset_config(args), kind.data_fallback, decimals=kind.data_decimals)


def resolve_paths(args: argparse.Namespace, kind: Kind) -> tuple[Path, Path]:
    """(data_dir, output_dir) with the defaults of the spec."""
    from mlrecipe_scripts.hf_trainer.common_base import model_id_parts

    data_dir = resolve_data_dir(args, kind)
    if args.output_dir:
        output_dir = Path(args.output_dir).expanduser()
    else:
        parts = model_id_parts(args.model_id) or ["model"]
        parts[-1] += kind.output_suffix
        output_dir = home_dir() / "results" / Path(*parts)
    return data_dir, output_dir


def prepare_data(args: argparse.Namespace, data_dir: Path) -> Path:
    """Prepare ``data_dir`` from ``--hf_dataset_name`` (rank 0; the others wait), or check it is usable as is."""
    config = dataset_config(args)
    if config is not None:
        poll = float(os.environ.get("MLRECIPE_DATA_POLL_SECONDS", "30"))
        return prepare_vlm_datasets(config, data_dir, poll_seconds=poll)
    flag = "--data_dir" if args.data_dir else "--data_dir (default)"
    if not data_dir.is_dir():
        raise ScriptError(f"{flag}={data_dir}: no such directory (pass --data_dir with training.jsonl, or "
                          "--hf_dataset_name to prepare one)")
    if not (data_dir / SPLIT_FILES["train"]).is_file():
        raise ScriptError(f"{flag}={data_dir}: no {SPLIT_FILES['train']} in it")
    if (data_dir / READY_MARKER).exists():
        log(f"dataset in {data_dir} ({READY_MARKER} found)")
    return data_dir


# --------------------------------------------------------------------------------------------------------------
# adapter, model, processor


def select_adapter(args: argparse.Namespace) -> tuple[Any, str, str]:
    """(adapter, model source, the flag naming it); errors name the flag."""
    flag = "--model_path" if args.model_path else "--model_id"
    source = check_model_source(args.model_path or args.model_id, flag)
    try:
        adapter = get_adapter_for_model(source)
    except ValueError as exc:
        raise ScriptError(f"{flag}={source}: {exc}") from None
    return adapter, source, flag


def load_processor(adapter: Any, source: str, flag: str) -> tuple[Any, Any]:
    """(processor, its tokenizer with a pad token, right padding)."""
    try:
        processor = adapter.load_processor(source, local_files_only=local_files_only())
    except Exception as exc:
        raise ScriptError(f"{flag}={source}: cannot load a processor ({short_error(exc)})") from exc
    if getattr(adapter, "processor_note", None):
        log(f"note: {adapter.processor_note}")
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None or not hasattr(processor, "image_processor"):
        raise ScriptError(f"{flag}={source}: its processor ({type(processor).__name__}) has no image processor and "
                          "tokenizer; is it a vision-language model?")
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ScriptError(f"{flag}={source}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(processor, "chat_template", None) is None and getattr(tokenizer, "chat_template", None) is None:
        raise ScriptError(f"{flag}={source}: the processor has no chat template")
    return processor, tokenizer


def load_model(adapter: Any, source: str, flag: str, precision: Any) -> Any:
    """The model in the device's precision / attention, ``use_cache`` off."""
    return adapter.load_model(source, flag=flag, dtype=precision.dtype,
                              attn_implementation=precision.attn_implementation, trust_remote_code=True,
                              use_cache=False)


def read_splits(data_dir: Path, max_eval_samples: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The validated rows of ``training.jsonl`` and ``validation.jsonl`` (missing file: no rows), read before any
    model is loaded so that bad data fails fast, naming ``path:line``."""
    train_path, val_path = data_dir / SPLIT_FILES["train"], data_dir / SPLIT_FILES["validation"]
    if not train_path.is_file():
        raise ScriptError(f"{train_path}: no such file (is --data_dir complete?)")
    train = read_vlm_jsonl(train_path)
    if not train:
        raise ScriptError(f"{train_path}: no training rows")
    val = read_vlm_jsonl(val_path, max_eval_samples) if val_path.is_file() else []
    return train, val


def build_datasets(dataset_cls: type, data_dir: Path, rows: tuple[list, list], adapter: Any, processor: Any,
                   tokenizer: Any, max_seq_length: int) -> tuple[Any, Any | None]:
    """(training dataset, validation dataset or None when there is no validation row) over ``rows``
    (from :func:`read_splits`)."""
    train = dataset_cls(data_dir / SPLIT_FILES["train"], adapter, processor, tokenizer, max_seq_length,
                        samples=rows[0])
    evaluation = dataset_cls(data_dir / SPLIT_FILES["validation"], adapter, processor, tokenizer, max_seq_length,
                             samples=rows[1]) if rows[1] else None
    log(f"data {data_dir}: {len(train)} training rows ({train.text_only_rows} text-only), "
        f"{len(evaluation) if evaluation else 0} validation rows used for evaluation")
    return train, evaluation


def apply_lora(model: Any, adapter: Any, args: argparse.Namespace, flag: str = "--model_path") -> Any:
    """Wrap ``model`` with LoRA (task CAUSAL_LM, bias none) on the adapter's target modules."""
    from peft import LoraConfig, get_peft_model

    target = adapter.lora_target_regex(include_vision=args.lora_on_vision)
    config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                        target_modules=target, bias="none", task_type="CAUSAL_LM")
    try:
        model = get_peft_model(model, config)
    except ValueError as exc:
        raise ScriptError(f"{flag}: LoRA targets {adapter.get_lora_target_modules(args.lora_on_vision)} match "
                          f"no module of the model ({short_error(exc)})") from exc
    model.enable_input_require_grads()  # gradients reach the adapters through checkpointed layers
    return model


def describe_parameters(adapter: Any, model: Any) -> str:
    """``trainable X / total Y (Z%)``."""
    counts = adapter.count_trainable_parameters(model)
    return f"trainable {counts['trainable']:,} / total {counts['total']:,} ({counts['percentage']:.2f}%)"


def save_final(trainer: Any, adapter: Any, processor: Any, source: str, final: Path) -> None:
    """``final/``: the model (or adapter) on every rank's call, the processor from rank 0."""
    from mlrecipe_scripts.hf_trainer.common_base import save_final_model

    class _ProcessorSaver:
        def save_pretrained(self, target: str) -> None:
            adapter.save_processor(processor, source, target)

    save_final_model(trainer, _ProcessorSaver(), final)
