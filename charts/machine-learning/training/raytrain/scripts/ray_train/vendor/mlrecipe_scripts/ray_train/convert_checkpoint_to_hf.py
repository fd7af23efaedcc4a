"""Convert the newest Ray Train checkpoint of ``text/ray_train_sft.py`` into a Hugging Face model or adapter.

The checkpoint is found under ``--checkpoints_dir`` (default ``$HOME/results/<base_model with / -> ->``): the newest
``TorchTrainer_*`` directory by modification time if there is one, then its newest ``checkpoint_*``, then the HF
directory ``checkpoint/`` inside it. That directory holds either a PEFT adapter (``adapter_config.json``) or a full
model; which one is read from the files (``--full_ft`` only confirms it; a mismatch is reported and the files win).

Writes next to it:

* ``<...>/checkpoint.hf_model/``: the adapter merged into the base model from ``--model_path`` (default
  ``--base_model``), or the fully fine-tuned model, as safetensors plus the tokenizer; or
* ``<...>/checkpoint.hf_peft/`` with ``--no_merge``: the adapter, the tokenizer and ``base_model.txt`` (the base
  model path).

The tokenizer comes from the checkpoint (else from the base model). The ``--lora_*`` flags are accepted and unused:
the adapter's own ``adapter_config.json`` describes it. Nothing is downloaded; the reference's ``ray.init()`` (unused
there) is not done. The output is written to a temporary directory and renamed when complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.ray_train.common import (
    ConvertArguments,
    ScriptError,
    atomic_dir,
    check_model_source,
    dataclass_parser,
    default_checkpoints_dir,
    is_adapter_dir,
    latest_ray_checkpoint,
    load_causal_lm,
    load_tokenizer,
    log,
    offline_defaults,
    run_main,
    short_error,
)


def build_parser() -> Any:
    """The argparse parser (family C)."""
    return dataclass_parser(ConvertArguments, "C", description=__doc__.split("\n")[0])


def parse_args(argv: list[str] | None = None) -> ConvertArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    return ConvertArguments(**vars(build_parser().parse_args(argv)))


@dataclass
class TrainedModel:
    """The checkpoint loaded: a PeftModel on its base (``kind == "lora"``) or the full model."""

    model: Any
    kind: str
    checkpoint: Path

    def merged(self) -> Any:
        """The plain model: the adapter merged into the base weights (or the full model as is)."""
        return self.model.merge_and_unload() if self.kind == "lora" else self.model


def checkpoint_kind(ckpt: Path, full_ft: bool) -> str:
    """``lora`` or ``full`` from the checkpoint's files; ``full_ft`` is only compared with it."""
    if is_adapter_dir(ckpt):
        kind = "lora"
    elif (ckpt / "config.json").is_file():
        kind = "full"
    else:
        raise ScriptError(f"{ckpt}: neither a PEFT adapter (adapter_config.json) nor a model (config.json)")
    if full_ft and kind == "lora":
        log(f"note: --full_ft given, but {ckpt} holds a LoRA adapter; merging the adapter")
    if not full_ft and kind == "full":
        log(f"note: {ckpt} holds a full model (a --full_ft training); using it as is")
    return kind


def load_trained_model(ckpt: Path, model_path: str, model_flag: str, full_ft: bool = False,
                       dtype: Any = "auto", device_map: Any = None) -> TrainedModel:
    """Load the checkpoint: the adapter onto the base model from ``model_path``, or the full model itself."""
    kind = checkpoint_kind(ckpt, full_ft)
    if kind == "full":
        model = load_causal_lm(str(ckpt), str(ckpt), dtype=dtype, device_map=device_map)
        return TrainedModel(model, kind, ckpt)
    from peft import PeftModel

    base = load_causal_lm(model_path, model_flag, dtype=dtype, device_map=device_map)
    try:
        model = PeftModel.from_pretrained(base, str(ckpt))
    except Exception as exc:
        raise ScriptError(f"{ckpt}: cannot apply the adapter to {model_flag}={model_path} "
                          f"({short_error(exc)})") from exc
    return TrainedModel(model, kind, ckpt)


def checkpoint_tokenizer(ckpt: Path, model_path: str, model_flag: str) -> Any:
    """The tokenizer saved with the checkpoint, else the base model's."""
    if (ckpt / "tokenizer_config.json").is_file() or (ckpt / "tokenizer.json").is_file():
        return load_tokenizer(str(ckpt), flag=str(ckpt))
    log(f"note: no tokenizer in {ckpt}; using the one of {model_path}")
    return load_tokenizer(model_path, flag=model_flag)


#: What a vision-language model's processor adds to its tokenizer files.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
                   "chat_template.json", "chat_template.jinja")


def copy_processor_files(ckpt: Path, model_path: str, out: Path) -> list[str]:
    """Copy the processor files of a vision-language checkpoint (else of its base model) into ``out``."""
    import shutil

    copied = []
    for name in PROCESSOR_FILES:
        source = next((d / name for d in (ckpt, Path(model_path)) if (d / name).is_file()), None)
        if source is not None and not (out / name).exists():
            shutil.copyfile(source, out / name)
            copied.append(name)
    return copied


def device_map() -> Any:
    """``"auto"`` where CUDA is available (merging on the GPUs), else None (CPU)."""
    import torch

    return "auto" if torch.cuda.is_available() else None


def main(argv: list[str] | None = None) -> int:
    """Convert; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if args.model_path else "--base_model"
    checkpoints_dir = Path(args.checkpoints_dir).expanduser() if args.checkpoints_dir else \
        default_checkpoints_dir(args.base_model)
    ckpt = latest_ray_checkpoint(checkpoints_dir)
    kind = checkpoint_kind(ckpt, args.full_ft)
    model_path = check_model_source(args.model_path or args.base_model, flag) if kind == "lora" else \
        (args.model_path or args.base_model)
    log(f"checkpoint {ckpt} ({'LoRA adapter' if kind == 'lora' else 'full model'})"
        + (f"; base model {model_path}" if kind == "lora" else ""))
    trained = load_trained_model(ckpt, model_path, flag, args.full_ft, device_map=device_map())
    tokenizer = checkpoint_tokenizer(ckpt, model_path, flag)
    if args.no_merge and kind == "lora":
        out = Path(f"{ckpt}.hf_peft")
        with atomic_dir(out) as tmp:
            trained.model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            copy_processor_files(ckpt, model_path, tmp)
            (tmp / "base_model.txt").write_text(model_path)
        log(f"wrote the adapter to {out} (base model in base_model.txt: {model_path})")
        return 0
    if args.no_merge:
        log("note: --no_merge has no effect on a full model")
    out = Path(f"{ckpt}.hf_model")
    model = trained.merged()
    with atomic_dir(out) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        copy_processor_files(ckpt, model_path, tmp)
    log(f"wrote the {'merged' if kind == 'lora' else 'full'} model to {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
