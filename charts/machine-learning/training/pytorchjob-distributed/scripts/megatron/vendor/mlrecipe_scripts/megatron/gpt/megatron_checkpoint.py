"""Megatron's own checkpoint layouts, read on CPU without megatron-core (for the export):

- ``iter_NNNNNNN/mp_rank_TT/model_optim_rng.pt`` (``--ckpt-format torch``): one file per tensor-parallel rank,
  its ``model`` state dict and Megatron's ``args``; the ranks' slices are merged
  (:func:`.hf_mapping.merge_tensor_parallel`).
  Pipeline-parallel folders (``mp_rank_TT_PPP`` with PPP > 0) are refused.
- ``iter_NNNNNNN/`` with ``metadata.json`` ``{"sharded_backend": "torch_dist"}``: megatron-core's distributed
  checkpoint, read with ``torch.distributed.checkpoint`` in this one process. Its tensors are already whole (global
  shapes, tensor-parallel slices joined); a transformer layer's tensors are stacked on a leading layer axis under
  ``decoder.layers.<name>`` and are unstacked to ``decoder.layers.<i>.<name>``. The non-tensor items (``args``,
  ``iteration``) are in ``common.pt``. Optimizer state and ``_extra_state`` bytes are not read.

Both give ``{"model", "shape", "args", "tensor_parallel"}`` with megatron-core's local-spec names
(:func:`.hf_mapping.megatron_names`).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.script_core import ScriptError

FILE = "model_optim_rng.pt"
MP_RANK = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?$")
MODEL_PREFIXES = ("embedding.", "decoder.", "output_layer.")
STACKED = re.compile(r"^decoder\.layers\.(?!\d)")


def is_megatron_folder(folder: Path) -> bool:
    """Whether ``folder`` (an ``iter_*`` folder) holds a complete checkpoint in one of Megatron's layouts."""
    return _is_dist(folder) or any((p / FILE).is_file() for p in folder.glob("mp_rank_*"))


def _is_dist(folder: Path) -> bool:
    try:
        meta = json.loads((folder / "metadata.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("sharded_backend") == "torch_dist" and (folder / ".metadata").is_file()


def read(folder: Path) -> dict[str, Any]:
    """The checkpoint in ``folder`` (ScriptError when it is in neither layout)."""
    if _is_dist(folder):
        return _read_dist(folder)
    ranks = sorted((m.group(1), m.group(2) or "000", p) for p in folder.glob("mp_rank_*")
                   if (m := MP_RANK.match(p.name)) and (p / FILE).is_file())
    if not ranks:
        raise ScriptError(f"{folder}: no checkpoint (neither {FILE}, mp_rank_NN/ nor a torch_dist checkpoint)")
    if any(pp != "000" for _, pp, _ in ranks):
        raise ScriptError(f"{folder}: pipeline-parallel shards (mp_rank_NN_PPP) are not supported; export a "
                          "checkpoint saved with pipeline parallel size 1 (or in the torch_dist format)")
    import torch

    from mlrecipe_scripts.megatron.gpt import hf_mapping

    shards = [torch.load(p / FILE, map_location="cpu", weights_only=False) for _, _, p in ranks]
    shape = shape_of(shards[0])
    models = [hf_mapping.megatron_names(s["model"]) for s in shards]
    merged = hf_mapping.merge_tensor_parallel(models, hf_mapping.MEGATRON_GPT, int(shape["num_layers"]))
    shape["vocab_size"] = int(merged["embedding.word_embeddings.weight"].shape[0])
    return {"model": merged, "shape": shape, "args": _args_dict(shards[0].get("args")),
            "tensor_parallel": len(shards)}


def _read_dist(folder: Path) -> dict[str, Any]:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from mlrecipe_scripts.megatron.gpt import hf_mapping

    reader = dcp.FileSystemReader(str(folder))
    wanted = {key: torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
              for key, meta in reader.read_metadata().state_dict_metadata.items()
              if isinstance(meta, TensorStorageMetadata) and key.startswith(MODEL_PREFIXES)}
    if not wanted:
        raise ScriptError(f"{folder}: a torch_dist checkpoint without model tensors")
    with warnings.catch_warnings():  # "torch.distributed is disabled ...": one process reading is the intent
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(wanted, storage_reader=reader, no_dist=True)
    model: dict[str, Any] = {}
    for key, tensor in wanted.items():
        if STACKED.match(key):
            rest = key[len("decoder.layers."):]
            for i in range(tensor.shape[0]):
                model[f"decoder.layers.{i}.{rest}"] = tensor[i].clone()
        else:
            model[key] = tensor
    common_file = folder / "common.pt"
    common = torch.load(common_file, map_location="cpu", weights_only=False) if common_file.is_file() else {}
    model = hf_mapping.megatron_names(model)
    shape = shape_of(common if isinstance(common, dict) else {})
    shape["vocab_size"] = int(model["embedding.word_embeddings.weight"].shape[0])
    return {"model": model, "shape": shape, "args": _args_dict(common.get("args")) if isinstance(common, dict)
            else {}, "tensor_parallel": None}


def shape_of(state: dict[str, Any]) -> dict[str, Any]:
    """The model's shape: this project's ``shape`` record, else Megatron's saved ``args``."""
    if isinstance(state.get("shape"), dict):
        return dict(state["shape"])
    margs = state.get("args")
    if margs is None:
        raise ScriptError("a Megatron checkpoint without its args: the model's shape is unknown")
    values: dict[str, Any] = dict(margs) if isinstance(margs, dict) else dict(vars(margs))

    def get(name: str, default: Any = None) -> Any:
        return values.get(name, default)

    heads = int(get("num_attention_heads"))
    groups = get("num_query_groups")
    if get("group_query_attention", False) and groups not in (None, heads):
        raise ScriptError(f"grouped-query attention ({groups} groups of {heads} heads) has no GPT-2 export")
    position = get("position_embedding_type", "learned_absolute")
    if position != "learned_absolute":
        raise ScriptError(f"position embedding {position!r}: GPT-2 has learned absolute positions only")
    return {"num_layers": int(get("num_layers")), "hidden_size": int(get("hidden_size")),
            "num_attention_heads": heads, "seq_length": int(get("max_position_embeddings") or get("seq_length")),
            "vocab_size": 0, "ffn_hidden_size": get("ffn_hidden_size"),
            "init_method_std": float(get("init_method_std", 0.02))}


def _args_dict(margs: Any) -> dict[str, Any]:
    if margs is None:
        return {}
    return dict(margs) if isinstance(margs, dict) else dict(vars(margs))
