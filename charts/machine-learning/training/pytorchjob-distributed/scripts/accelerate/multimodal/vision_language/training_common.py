"""What the VLM trainers (``peft_accelerate.py``, ``cpt_accelerate.py``) share: their flags (family H, hand-written
argparse), path defaults, data preparation, adapter / model / processor loading and the datasets.

Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_VL_DIR = str(Path(__file__).resolve().parent)
_ACCELERATE_DIR = str(Path(__file__).resolve().parent.parent.parent)
for _p in (_ACCELERATE_DIR, _VL_DIR):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from adapters.registry import get_adapter_for_model
from dataset_module import (
    READY_MARKER,
    SPLIT_FILES,
    VLMDatasetConfig,
    default_data_dir,
    prepare_vlm_datasets,
    read_vlm_jsonl,
)
from shared.common import ScriptError, check_model_source, home_dir, log, model_id_parts, short_error

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


SFT = Kind("sft", True, 0.9, "visual_instruct", 0, "")
CPT = Kind("cpt", False, 0.99, "visual_cpt", 2, "-cpt")


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


def add_dataset_flags(parser: argparse.ArgumentParser, kind: Kind) -> None:
    """``--data_dir``, ``--output_dir`` and the ``--hf_*`` dataset flags."""
    paths = parser.add_argument_group("paths")
    paths.add_argument("--data_dir", type=str, default=None,
                       help="holds training.jsonl / validation.jsonl (default: derived from --hf_dataset_name, else "
                            f"$HOME/datasets/{kind.data_fallback})")
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


def resolve_paths(args: argparse.Namespace, kind: Kind) -> tuple[Path, Path]:
    """(data_dir, output_dir) with the defaults of the spec."""
    if args.data_dir:
        data_dir = Path(args.data_dir).expanduser()
    else:
        data_dir = default_data_dir(dataset_config(args), kind.data_fallback, decimals=kind.data_decimals)
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


def describe_parameters(adapter: Any, model: Any) -> str:
    """``trainable X / total Y (Z%)``."""
    counts = adapter.count_trainable_parameters(model)
    return f"trainable {counts['trainable']:,} / total {counts['total']:,} ({counts['percentage']:.2f}%)"


def save_final(trainer: Any, adapter: Any, processor: Any, source: str, final: Path) -> None:
    """``final/``: the model (or adapter) on every rank's call, the processor from rank 0."""
    from shared.common import save_final_model

    class _ProcessorSaver:
        def save_pretrained(self, target: str) -> None:
            adapter.save_processor(processor, source, target)

    save_final_model(trainer, _ProcessorSaver(), final)
