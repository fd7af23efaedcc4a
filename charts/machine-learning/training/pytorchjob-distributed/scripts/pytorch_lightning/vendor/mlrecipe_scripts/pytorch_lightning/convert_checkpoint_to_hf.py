"""Convert the newest Lightning fine-tuning checkpoint into a Hugging Face model (merged) or a PEFT adapter.

Takes the newest (by modification time) ``model-*.ckpt`` in ``--checkpoints_dir`` (default
``$HOME/results/<base_model>/checkpoints``), loads its ``state_dict`` (one leading ``model.`` stripped), rebuilds
the base model from ``--model_path`` (default ``--base_model``; nothing is downloaded unless ``HF_HUB_OFFLINE=0``)
with the LoRA adapter when the checkpoint has LoRA tensors, loads the trained tensors into it and checks that every
adapter weight (LoRA) or every model weight (full fine-tuning) was found. Writes, next to the checkpoint:

* ``<checkpoint minus .ckpt>.hf_model/``: LoRA merged into the base weights (or the fully fine-tuned model),
  safetensors plus the tokenizer of ``--model_path``; or
* ``<checkpoint minus .ckpt>.hf_peft/`` with ``--no_merge``: the adapter, the tokenizer and ``base_model.txt``.

The LoRA rank / alpha / dropout / target modules are read from the checkpoint's hyper-parameters (written by
``fine_tune.py``), else inferred from the tensors; the ``--lora_*`` flags are the fallback. The output is written to
a temporary directory and renamed when complete.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.pytorch_lightning.ptl_common import (
    DEFAULT_LORA_TARGETS,
    ScriptError,
    add_flags,
    atomic_dir,
    check_model_source,
    comma_list,
    load_causal_lm,
    load_tokenizer,
    log,
    newest_checkpoint,
    offline_defaults,
    results_dir,
    run_main,
    short_error,
    sibling_path,
)

_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_ADAPTER_NAME = re.compile(r"\.(lora_[AB]|lora_embedding_[AB]|lora_magnitude_vector)\.[^.]+(?=\.weight$|$)")


@dataclass
class ConvertConfig:
    """Flags (family C: typed; ``--no_merge`` is ``store_true``; the target modules are a comma string)."""

    model_path: str | None = None
    base_model: str = "Qwen/Qwen3-8B"
    checkpoints_dir: str | None = None
    lora_rank: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_target_modules: str = DEFAULT_LORA_TARGETS
    no_merge: bool = False


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (family C)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flags(parser, ConvertConfig)
    return parser


def parse_args(argv: list[str] | None = None) -> ConvertConfig:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    return ConvertConfig(**vars(build_parser().parse_args(argv)))


def default_checkpoints_dir(base_model: str) -> Path:
    """``$HOME/results/<base_model>/checkpoints``."""
    return results_dir(base_model) / "checkpoints"


# --------------------------------------------------------------------------------------------------------------
# reading a Lightning checkpoint


def canonical_name(key: str) -> str:
    """A parameter name without wrappers (FSDP / activation checkpointing / compile / DDP ``module.``), without the
    PEFT prefix ``base_model.model.``, the adapter name (``lora_A.default`` -> ``lora_A``) and ``.base_layer``.

    The checkpoint's ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight`` and the rebuilt
    PeftModel's own key both give ``model.layers.0.self_attn.q_proj.lora_A.weight``.
    """
    for token in _WRAPPERS:
        key = key.replace(token, "")
    key = key.removeprefix("module.").removeprefix("base_model.model.")
    key = _ADAPTER_NAME.sub(r".\1", key)
    return key.replace(".base_layer.", ".")


def read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors with one leading ``model.`` stripped, hyper-parameters) of a Lightning ``.ckpt`` file."""
    import pickle

    import torch

    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError:  # objects beyond tensors and plain containers (another trainer's hparams)
            log(f"note: {path.name} holds more than tensors and plain data; loading it with weights_only=False "
                "(only do this for checkpoints you trust)")
            loaded = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, ValueError) as exc:
        raise ScriptError(f"{path}: not a readable checkpoint ({short_error(exc)})") from exc
    if not isinstance(loaded, dict) or not isinstance(loaded.get("state_dict"), dict):
        raise ScriptError(f"{path}: not a Lightning checkpoint (no state_dict in it)")
    tensors = {k.removeprefix("model."): v for k, v in loaded["state_dict"].items()
               if isinstance(v, torch.Tensor)}
    if not tensors:
        raise ScriptError(f"{path}: its state_dict holds no tensors")
    hparams = loaded.get("hyper_parameters") or {}
    return tensors, dict(hparams) if isinstance(hparams, dict) else {}


def is_lora_checkpoint(tensors: dict[str, Any]) -> bool:
    """Whether the checkpoint holds LoRA weights (the reference looks for ``lora`` in the first 100 keys)."""
    return any(".lora_A." in k or ".lora_B." in k for k in tensors)


def lora_settings(tensors: dict[str, Any], hparams: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """r / alpha / dropout / target modules: from the checkpoint's ``lora_config`` hyper-parameters (fine_tune.py),
    else rank and targets from the tensors and alpha / dropout from the flags."""
    saved = hparams.get("lora_config")
    settings: dict[str, Any]
    if isinstance(saved, dict) and {"rank", "alpha", "target_modules"} <= set(saved):
        settings = {"r": int(saved["rank"]), "lora_alpha": int(saved["alpha"]),
                    "lora_dropout": float(saved.get("dropout", flags["lora_dropout"])),
                    "target_modules": sorted(comma_list(saved["target_modules"])), "source": "checkpoint"}
    else:
        ranks, targets = set(), set()
        for key, tensor in tensors.items():
            name = canonical_name(key)
            if name.endswith(".lora_A.weight"):
                ranks.add(int(tensor.shape[0]))
                targets.add(name[: -len(".lora_A.weight")].rsplit(".", 1)[-1])
        settings = {"r": ranks.pop() if len(ranks) == 1 else flags["lora_rank"], "lora_alpha": flags["lora_alpha"],
                    "lora_dropout": flags["lora_dropout"],
                    "target_modules": sorted(targets) or sorted(flags["lora_target_modules"]), "source": "tensors"}
        log(f"note: no LoRA settings in the checkpoint's hyper-parameters: rank {settings['r']} and targets from its "
            f"tensors, --lora_alpha={flags['lora_alpha']} (it must match training)")
    differs = [f"--{flag}" for flag, key in (("lora_rank", "r"), ("lora_alpha", "lora_alpha"))
               if flags[flag] != settings[key]]
    if sorted(flags["lora_target_modules"]) != settings["target_modules"]:
        differs.append("--lora_target_modules")
    if differs and settings["source"] == "checkpoint":
        log(f"note: {', '.join(differs)} differ from the checkpoint's LoRA settings; the checkpoint's are used "
            f"(r={settings['r']}, alpha={settings['lora_alpha']}, on {','.join(settings['target_modules'])})")
    return settings


@dataclass
class TrainedModel:
    """The base model with the checkpoint's trained tensors loaded: a PeftModel (``kind == "lora"``) or plain."""

    model: Any
    kind: str
    checkpoint: Path
    tensors_loaded: int
    lora: dict[str, Any] | None = None

    def merged(self) -> Any:
        """The plain model: LoRA merged into the base weights (the full model as is)."""
        return self.model.merge_and_unload() if self.kind == "lora" else self.model


def load_trained_model(ckpt: Path, model_path: str, model_flag: str, flags: dict[str, Any], dtype: Any = "auto",
                       device_map: Any = None) -> TrainedModel:
    """Rebuild the model of ``ckpt`` on the base at ``model_path`` and load every trained tensor into it."""
    tensors, hparams = read_checkpoint(ckpt)
    lora = is_lora_checkpoint(tensors)
    model = load_causal_lm(model_path, model_flag, dtype=dtype, device_map=device_map)
    settings = None
    if lora:
        from peft import LoraConfig, TaskType, get_peft_model

        settings = lora_settings(tensors, hparams, flags)
        config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=settings["r"], lora_alpha=settings["lora_alpha"],
                            lora_dropout=settings["lora_dropout"], target_modules=settings["target_modules"],
                            bias="none")
        try:
            model = get_peft_model(model, config)
        except ValueError as exc:
            raise ScriptError(f"{ckpt}: its LoRA targets do not fit the model at {model_flag}={model_path} "
                              f"({short_error(exc)})") from exc
    own = {canonical_name(k): k for k in model.state_dict()}
    wanted, unused = {}, []
    for key, tensor in tensors.items():
        name = own.get(canonical_name(key))
        if name is None:
            unused.append(key)
        else:
            wanted[name] = tensor
    if not wanted:
        raise ScriptError(f"{ckpt}: none of its tensors match the model at {model_flag}={model_path}")
    try:
        model.load_state_dict(wanted, strict=False)
    except RuntimeError as exc:
        raise ScriptError(f"{ckpt}: tensor shapes do not match the model at {model_flag}={model_path} "
                          f"({short_error(exc)})") from exc
    if lora:
        missing = sorted(k for k in model.state_dict() if "lora_" in k and k not in wanted)
        stray = [k for k in unused if ".lora_" in k]
        if missing or stray:
            raise ScriptError(f"{ckpt}: its LoRA weights do not line up with the rebuilt adapter ({len(missing)} "
                              f"missing, {len(stray)} unused, e.g. {(missing or stray)[0]})")
    else:
        tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
        missing = sorted(k for k in model.state_dict() if k not in wanted and k not in tied)
        if missing:
            raise ScriptError(f"{ckpt}: {len(missing)} weights of the model at {model_path} are not in the "
                              f"checkpoint (e.g. {missing[0]}); is it a checkpoint of another model?")
    if unused:
        log(f"note: {len(unused)} checkpoint tensors have no place in the model (e.g. {unused[0]}); ignored")
    model.eval()
    return TrainedModel(model, "lora" if lora else "full", ckpt, len(wanted),
                        {k: v for k, v in settings.items() if k != "source"} if settings else None)


def lora_flags(config: Any) -> dict[str, Any]:
    """The ``--lora_*`` flags as :func:`load_trained_model` takes them."""
    return {"lora_rank": config.lora_rank, "lora_alpha": config.lora_alpha, "lora_dropout": config.lora_dropout,
            "lora_target_modules": comma_list(config.lora_target_modules)}


def device_map_for_loading() -> Any:
    """``"auto"`` where CUDA is usable (the reference loads onto the GPUs), else None (CPU)."""
    import torch

    return "auto" if torch.cuda.is_available() else None


def main(argv: list[str] | None = None) -> int:
    """Convert and write; returns the exit status."""
    config = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if config.model_path else "--base_model"
    model_path = check_model_source(config.model_path or config.base_model, flag)
    checkpoints = Path(config.checkpoints_dir).expanduser() if config.checkpoints_dir else \
        default_checkpoints_dir(config.base_model)
    ckpt = newest_checkpoint(checkpoints)
    log(f"checkpoint {ckpt}; base model {model_path}")
    trained = load_trained_model(ckpt, model_path, flag, lora_flags(config), device_map=device_map_for_loading())
    detail = f"LoRA r={trained.lora['r']}, alpha={trained.lora['lora_alpha']}, on " \
             f"{','.join(trained.lora['target_modules'])}" if trained.lora else "full fine-tuning"
    log(f"loaded {trained.tensors_loaded} tensors ({detail})")
    tokenizer = load_tokenizer(model_path, flag)
    adapter = config.no_merge and trained.kind == "lora"
    if config.no_merge and not adapter:
        log("note: --no_merge ignored: the checkpoint holds a fully fine-tuned model, not an adapter")
    out = sibling_path(ckpt, ".hf_peft" if adapter else ".hf_model")
    with atomic_dir(out) as tmp:
        if adapter:
            trained.model.save_pretrained(str(tmp))
            (tmp / "base_model.txt").write_text(model_path)
        else:
            trained.merged().save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    log(f"wrote {out} ({'adapter' if adapter else 'merged model' if trained.kind == 'lora' else 'model'})")
    return 0


if __name__ == "__main__":
    run_main(main)
