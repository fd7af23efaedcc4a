"""Convert the newest accelerate training checkpoint into a Hugging Face model (merged) or a PEFT adapter.

Finds the highest ``checkpoint-<N>`` under ``--checkpoints_dir`` (default ``$HOME/results/<base_model>``; names
such as ``checkpoint-N.hf_model`` are skipped), really loads its trained weights and writes, next to it:

* ``checkpoint-<N>.hf_model/``: the LoRA adapter merged into the base model (or, for full fine-tuning, the model),
  ``save_pretrained`` safetensors plus the tokenizer; or
* ``checkpoint-<N>.hf_peft/`` with ``--no_merge``: the adapter, the tokenizer and ``base_model.txt`` (the base path).

Checkpoint formats read: a plain HF Trainer checkpoint (``adapter_model.safetensors`` or ``model.safetensors``,
sharded or not, or ``pytorch_model.bin``), and an FSDP ``SHARDED_STATE_DICT`` checkpoint whose weights are in the
torch.distributed.checkpoint directory ``pytorch_model_fsdp_0/`` (tensors under the top-level key ``model``).
LoRA rank and target modules are read from the checkpoint (``adapter_config.json`` or the tensor shapes); the
flags are the fallback, and ``--lora_alpha`` is used when the checkpoint has no ``adapter_config.json``.
The base weights and tokenizer come from ``--model_path`` (default: ``--base_model``); nothing is downloaded.
The output is written to a temporary directory and renamed when complete.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe_scripts.accelerate.common import (
    DEFAULT_LORA_TARGETS,
    ConvertArguments,
    ScriptError,
    atomic_dir,
    check_model_source,
    comma_list,
    dataclass_parser,
    latest_checkpoint,
    load_causal_lm,
    load_tokenizer,
    log,
    offline_defaults,
    results_dir,
    run_main,
    short_error,
)

DCP_DIR = "pytorch_model_fsdp_0"
_WRAPPER_TOKENS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_ADAPTER_SEGMENT = re.compile(r"\.(lora_[AB]|lora_embedding_[AB]|lora_magnitude_vector)\.default(?=\.|$)")


def build_parser() -> Any:
    """The argparse parser (family C)."""
    return dataclass_parser(ConvertArguments, "C", description=__doc__.split("\n")[0])


def parse_args(argv: list[str] | None = None) -> ConvertArguments:
    """Parse the command line (strict: an unknown flag exits with status 2)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    return ConvertArguments(**{k: v for k, v in vars(ns).items()})


# --------------------------------------------------------------------------------------------------------------
# reading checkpoint tensors


def canonical_name(key: str) -> str:
    """A parameter name stripped of wrappers: FSDP / checkpoint / compile wrappers, ``module.``, the PEFT
    ``base_model.model.`` prefix, the adapter name ``.default`` and ``.base_layer``.

    ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight`` and the adapter file's
    ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`` both give
    ``model.layers.0.self_attn.q_proj.lora_A.weight``; a base weight gives the plain model's name.
    """
    for token in _WRAPPER_TOKENS:
        key = key.replace(token, "")
    if key.startswith("module."):
        key = key[len("module."):]
    if key.startswith("base_model.model."):
        key = key[len("base_model.model."):]
    key = _ADAPTER_SEGMENT.sub(r".\1", key)
    return key.replace(".base_layer.", ".")


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def load_dcp_state_dict(dcp_dir: Path) -> dict[str, Any]:
    """All tensors of a torch.distributed.checkpoint directory (no process group needed), ``model.`` stripped."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    try:
        workdir = tempfile.TemporaryDirectory(prefix=".dcp-", dir=dcp_dir.parent)
    except OSError:  # a read-only checkpoint directory
        workdir = tempfile.TemporaryDirectory(prefix="dcp-")
    with workdir as tmp:
        target = Path(tmp) / "state_dict.pt"
        try:
            dcp_to_torch_save(str(dcp_dir), str(target))
        except Exception as exc:
            raise ScriptError(f"{dcp_dir}: not a readable torch.distributed.checkpoint ({short_error(exc)})") from exc
        loaded = torch.load(target, map_location="cpu", weights_only=True)
    if not isinstance(loaded, dict):
        raise ScriptError(f"{dcp_dir}: unexpected content ({type(loaded).__name__})")
    if isinstance(loaded.get("model"), dict):  # accelerate saves {"model": state_dict}
        flat = _flatten(loaded["model"])
    else:
        flat = _flatten(loaded)
        if all(k.startswith("model.") for k in flat) and \
                any(k.startswith(("model.model.", "model.base_model.", "model.lm_head.")) for k in flat):
            flat = {k[len("model."):]: v for k, v in flat.items()}
    tensors = {k: v for k, v in flat.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise ScriptError(f"{dcp_dir}: holds no tensors")
    return tensors


def _load_weight_files(files: list[Path]) -> dict[str, Any]:
    import torch

    tensors: dict[str, Any] = {}
    for path in files:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            tensors.update(load_file(str(path), device="cpu"))
        else:
            tensors.update(torch.load(path, map_location="cpu", weights_only=True))
    return tensors


def read_checkpoint_tensors(ckpt: Path) -> tuple[dict[str, Any], str]:
    """(tensors keyed by their saved names, the file or directory they came from) for one checkpoint dir."""
    for name in ("adapter_model.safetensors", "adapter_model.bin"):
        if (ckpt / name).is_file():
            return _load_weight_files([ckpt / name]), name
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = ckpt / index_name
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return _load_weight_files([ckpt / s for s in shards]), index_name
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (ckpt / name).is_file():
            return _load_weight_files([ckpt / name]), name
    if (ckpt / DCP_DIR).is_dir():
        return load_dcp_state_dict(ckpt / DCP_DIR), f"{DCP_DIR}/ (torch.distributed.checkpoint)"
    raise ScriptError(f"{ckpt}: no weights in it (no adapter_model.safetensors, model.safetensors or {DCP_DIR}/)")


# --------------------------------------------------------------------------------------------------------------
# rebuilding the trained model


@dataclass
class TrainedModel:
    """A model with the checkpoint's weights loaded: a PeftModel (``kind == "lora"``) or a plain model."""

    model: Any
    kind: str
    source: str
    tensors_loaded: int
    lora: dict[str, Any] | None = None

    def merged(self) -> Any:
        """The plain model: LoRA merged into the base weights (or the full model as is)."""
        return self.model.merge_and_unload() if self.kind == "lora" else self.model


def _lora_from_tensors(canon: dict[str, Any]) -> tuple[int | None, list[str]]:
    ranks, targets = set(), set()
    for key, tensor in canon.items():
        if key.endswith("lora_A.weight"):
            ranks.add(int(tensor.shape[0]))
            targets.add(key[: -len(".lora_A.weight")].rsplit(".", 1)[-1])
    return (ranks.pop() if len(ranks) == 1 else None), sorted(targets)


def _lora_config(ckpt: Path, canon: dict[str, Any], rank: int, alpha: int, dropout: float,
                 targets: list[str]) -> Any:
    from peft import LoraConfig, PeftConfig

    if (ckpt / "adapter_config.json").is_file():
        try:
            config = PeftConfig.from_pretrained(str(ckpt))
            config.inference_mode = False
            return config
        except Exception as exc:
            log(f"note: cannot read {ckpt / 'adapter_config.json'} ({short_error(exc)}); using the flags")
    inferred_rank, inferred_targets = _lora_from_tensors(canon)
    if inferred_rank is not None and inferred_rank != rank:
        log(f"note: --lora_rank={rank} but the checkpoint's LoRA rank is {inferred_rank}; using {inferred_rank}")
        rank = inferred_rank
    if inferred_targets and sorted(inferred_targets) != sorted(targets):
        log(f"note: the checkpoint has LoRA on {','.join(inferred_targets)} (flags: {','.join(targets)}); "
            "using the checkpoint's")
        targets = inferred_targets
    log(f"LoRA alpha {alpha} from --lora_alpha (no adapter_config.json in the checkpoint; it must match training)")
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none",
                      task_type="CAUSAL_LM")


def load_trained_model(ckpt: Path, model_path: str, model_flag: str = "--model_path", *, full_ft: bool = False,
                       lora_rank: int = 32, lora_alpha: int = 32, lora_dropout: float = 0.1,
                       lora_target_modules: list[str] | None = None, dtype: Any = "auto",
                       device_map: Any = None, trust_remote_code: bool = True) -> TrainedModel:
    """Build the base model from ``model_path`` and load the checkpoint's trained tensors into it.

    A checkpoint with ``lora_A`` tensors is LoRA (an error with ``full_ft``); otherwise it is a full model.
    Every LoRA weight of the rebuilt adapter (LoRA) or every weight of the model (full) must be found in the
    checkpoint, else :class:`ScriptError` (rank / target modules / base model mismatch).
    """
    raw, source = read_checkpoint_tensors(ckpt)
    canon = {canonical_name(k): v for k, v in raw.items()}
    is_lora = any(".lora_A." in k or k.endswith(".lora_A.weight") for k in canon)
    if is_lora and full_ft:
        raise ScriptError(f"--full_ft given, but {ckpt / source} holds a LoRA adapter")
    model = load_causal_lm(model_path, model_flag, dtype=dtype, attn_implementation="sdpa",
                           trust_remote_code=trust_remote_code, device_map=device_map)
    lora_info = None
    if is_lora:
        from peft import get_peft_model

        config = _lora_config(ckpt, canon, lora_rank, lora_alpha, lora_dropout,
                              lora_target_modules or comma_list(DEFAULT_LORA_TARGETS))
        try:
            model = get_peft_model(model, config)
        except ValueError as exc:
            raise ScriptError(f"{ckpt}: its LoRA targets do not fit the model at {model_path} "
                              f"({short_error(exc)})") from exc
        lora_info = {"r": config.r, "lora_alpha": config.lora_alpha,
                     "target_modules": sorted(config.target_modules or [])}
    by_canon = {canonical_name(k): k for k in model.state_dict()}
    wanted = {by_canon[c]: t for c, t in canon.items() if c in by_canon}
    if not wanted:
        raise ScriptError(f"{ckpt / source}: none of its tensors match the model at {model_flag}={model_path}")
    try:
        model.load_state_dict(wanted, strict=False)
    except RuntimeError as exc:
        raise ScriptError(f"{ckpt / source}: tensor shapes do not match the model at {model_path} "
                          f"(LoRA rank or base model mismatch: {short_error(exc)})") from exc
    model_keys = set(model.state_dict())
    if is_lora:
        missing = sorted(k for k in model_keys if "lora_" in k and k not in wanted)
        unused = sorted(c for c in canon if "lora_" in c and c not in by_canon)
        if missing or unused:
            example = (missing or unused)[0]
            raise ScriptError(f"{ckpt / source}: LoRA weights do not line up with the rebuilt adapter "
                              f"({len(missing)} missing, {len(unused)} unused, e.g. {example})")
    else:
        tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
        missing = sorted(k for k in model_keys if k not in wanted and k not in tied)
        if missing:
            raise ScriptError(f"{ckpt / source}: {len(missing)} weights of the model are not in the checkpoint "
                              f"(e.g. {missing[0]}); is it a LoRA or partial checkpoint?")
    model.eval()
    return TrainedModel(model=model, kind="lora" if is_lora else "full", source=source,
                        tensors_loaded=len(wanted), lora=lora_info)


def device_map_for_loading() -> Any:
    """``"auto"`` when CUDA is usable (the reference loads on the GPUs), else None (CPU)."""
    import torch

    return "auto" if torch.cuda.is_available() else None


def output_path(ckpt: Path, peft: bool) -> Path:
    """``<checkpoint-N>.hf_peft`` or ``<checkpoint-N>.hf_model`` next to the checkpoint."""
    return ckpt.parent / f"{ckpt.name}.{'hf_peft' if peft else 'hf_model'}"


def main(argv: list[str] | None = None) -> int:
    """Convert and write; returns the exit status."""
    args = parse_args(argv)
    offline_defaults()
    flag = "--model_path" if args.model_path else "--base_model"
    model_path = check_model_source(args.model_path or args.base_model, flag)
    checkpoints_dir = Path(args.checkpoints_dir).expanduser() if args.checkpoints_dir else results_dir(args.base_model)
    ckpt = latest_checkpoint(checkpoints_dir)
    log(f"checkpoint {ckpt}; base model {model_path}")
    trained = load_trained_model(ckpt, model_path, flag, full_ft=args.full_ft, lora_rank=args.lora_rank,
                                 lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                                 lora_target_modules=comma_list(args.lora_target_modules),
                                 device_map=device_map_for_loading())
    detail = f" (LoRA r={trained.lora['r']}, alpha={trained.lora['lora_alpha']}, " \
             f"on {','.join(trained.lora['target_modules'])})" if trained.lora else " (full model)"
    log(f"loaded {trained.tensors_loaded} tensors from {trained.source}{detail}")
    tokenizer = load_tokenizer(model_path, flag=flag)
    keep_adapter = args.no_merge and trained.kind == "lora"
    if args.no_merge and trained.kind != "lora":
        log("note: --no_merge ignored: the checkpoint is a full model")
    out = output_path(ckpt, keep_adapter)
    with atomic_dir(out) as tmp:
        if keep_adapter:
            trained.model.save_pretrained(str(tmp))
            (tmp / "base_model.txt").write_text(model_path)
        else:
            trained.merged().save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    log(f"wrote {out} ({'adapter' if keep_adapter else 'merged model' if trained.kind == 'lora' else 'model'})")
    return 0


if __name__ == "__main__":
    run_main(main)
