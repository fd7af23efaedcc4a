"""The weight mapping between pretraining's GPT models and Hugging Face's ``GPT2LMHeadModel``, both ways.

Both GPTs of :mod:`.model` are GPT-2's architecture exactly: learned absolute positions, pre-LayerNorm blocks
(epsilon 1e-5, with biases), biased linear layers, an MLP of ``ffn`` with the exact (erf) GELU, a final LayerNorm, and
attention scaled by ``1/sqrt(head_dim)``. So the export is ``GPT2LMHeadModel`` with ``activation_function: gelu``
(GPT-2's own default, ``gelu_new``, is the tanh approximation: a different model) and dropout 0. The plain-torch GPT
ties its output layer to the word embeddings (``tie_word_embeddings: true``); megatron-core's ``GPTModel`` as
pretraining builds it does not (``share_embeddings_and_output_weights`` False: ``lm_head.weight`` is exported).

One row per tensor (``{i}`` is the layer number); ``op`` is what happens on the way to Hugging Face:

- ``copy``: the same tensor;
- ``transpose``: GPT-2's ``Conv1D`` stores ``[in, out]``, torch's ``Linear`` ``[out, in]``;
- ``qkv``: megatron-core's fused QKV rows are grouped per head (``[head][q|k|v][head_dim]``); GPT-2's ``c_attn``
  columns are ``[q of all heads | k | v]``: the rows are regrouped, then transposed. The plain-torch GPT already
  orders its rows as GPT-2 does (``transpose`` only).

``tp_axis`` (megatron-core) is the axis along which tensor-parallel ranks hold slices (``None``: every rank holds
the whole tensor): shards are concatenated along it, heads in rank order, before the mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

LAYER_NORM_EPSILON = 1e-5


@dataclass(frozen=True)
class Rule:
    """One tensor: our name, Hugging Face's name, the operation between them, the tensor-parallel axis."""

    ours: str
    hf: str
    op: str = "copy"
    tp_axis: int | None = None


_H = "transformer.h.{i}"
TORCH_GPT: tuple[Rule, ...] = (
    Rule("embedding.weight", "transformer.wte.weight"),
    Rule("position.weight", "transformer.wpe.weight"),
    Rule("blocks.{i}.ln1.weight", f"{_H}.ln_1.weight"),
    Rule("blocks.{i}.ln1.bias", f"{_H}.ln_1.bias"),
    Rule("blocks.{i}.qkv.weight", f"{_H}.attn.c_attn.weight", "transpose"),
    Rule("blocks.{i}.qkv.bias", f"{_H}.attn.c_attn.bias"),
    Rule("blocks.{i}.proj.weight", f"{_H}.attn.c_proj.weight", "transpose"),
    Rule("blocks.{i}.proj.bias", f"{_H}.attn.c_proj.bias"),
    Rule("blocks.{i}.ln2.weight", f"{_H}.ln_2.weight"),
    Rule("blocks.{i}.ln2.bias", f"{_H}.ln_2.bias"),
    Rule("blocks.{i}.fc1.weight", f"{_H}.mlp.c_fc.weight", "transpose"),
    Rule("blocks.{i}.fc1.bias", f"{_H}.mlp.c_fc.bias"),
    Rule("blocks.{i}.fc2.weight", f"{_H}.mlp.c_proj.weight", "transpose"),
    Rule("blocks.{i}.fc2.bias", f"{_H}.mlp.c_proj.bias"),
    Rule("final_ln.weight", "transformer.ln_f.weight"),
    Rule("final_ln.bias", "transformer.ln_f.bias"),
)
"""The plain-torch GPT (CPU path). ``lm_head.weight`` is tied to ``transformer.wte.weight``: not stored."""

_L = "decoder.layers.{i}"
MEGATRON_GPT: tuple[Rule, ...] = (
    Rule("embedding.word_embeddings.weight", "transformer.wte.weight", tp_axis=0),
    Rule("embedding.position_embeddings.weight", "transformer.wpe.weight"),
    Rule(f"{_L}.input_layernorm.weight", f"{_H}.ln_1.weight"),
    Rule(f"{_L}.input_layernorm.bias", f"{_H}.ln_1.bias"),
    Rule(f"{_L}.self_attention.linear_qkv.weight", f"{_H}.attn.c_attn.weight", "qkv", 0),
    Rule(f"{_L}.self_attention.linear_qkv.bias", f"{_H}.attn.c_attn.bias", "qkv", 0),
    Rule(f"{_L}.self_attention.linear_proj.weight", f"{_H}.attn.c_proj.weight", "transpose", 1),
    Rule(f"{_L}.self_attention.linear_proj.bias", f"{_H}.attn.c_proj.bias"),
    Rule(f"{_L}.pre_mlp_layernorm.weight", f"{_H}.ln_2.weight"),
    Rule(f"{_L}.pre_mlp_layernorm.bias", f"{_H}.ln_2.bias"),
    Rule(f"{_L}.mlp.linear_fc1.weight", f"{_H}.mlp.c_fc.weight", "transpose", 0),
    Rule(f"{_L}.mlp.linear_fc1.bias", f"{_H}.mlp.c_fc.bias", tp_axis=0),
    Rule(f"{_L}.mlp.linear_fc2.weight", f"{_H}.mlp.c_proj.weight", "transpose", 1),
    Rule(f"{_L}.mlp.linear_fc2.bias", f"{_H}.mlp.c_proj.bias"),
    Rule("decoder.final_layernorm.weight", "transformer.ln_f.weight"),
    Rule("decoder.final_layernorm.bias", "transformer.ln_f.bias"),
    Rule("output_layer.weight", "lm_head.weight", tp_axis=0),
)
"""megatron-core's ``GPTModel``, local layer spec (GPU path; ``output_layer`` absent when it shares the embeddings)."""

TRANSFORMER_ENGINE_NAMES = {
    f"{_L}.input_layernorm.weight": f"{_L}.self_attention.linear_qkv.layer_norm_weight",
    f"{_L}.input_layernorm.bias": f"{_L}.self_attention.linear_qkv.layer_norm_bias",
    f"{_L}.pre_mlp_layernorm.weight": f"{_L}.mlp.linear_fc1.layer_norm_weight",
    f"{_L}.pre_mlp_layernorm.bias": f"{_L}.mlp.linear_fc1.layer_norm_bias",
}
"""TransformerEngine's layer spec fuses the LayerNorms into the next linear layer: the same tensors, other names."""


class MappingError(Exception):
    """A state dict or Hugging Face model that does not fit the mapping (names, shapes, configuration)."""


def rows(rules: tuple[Rule, ...], layers: int) -> list[Rule]:
    """The rules with ``{i}`` expanded for every layer, in the models' own order (each layer's tensors together)."""
    per_layer = [r for r in rules if "{i}" in r.ours]
    first = rules.index(per_layer[0]) if per_layer else len(rules)
    before = [r for r in rules[:first] if "{i}" not in r.ours]
    after = [r for r in rules[first:] if "{i}" not in r.ours]
    layered = [Rule(r.ours.format(i=i), r.hf.format(i=i), r.op, r.tp_axis) for i in range(layers) for r in per_layer]
    return [*before, *layered, *after]


def _qkv_to_hf(t: torch.Tensor, heads: int) -> torch.Tensor:
    grouped = t.reshape(heads, 3, t.shape[0] // (3 * heads), *t.shape[1:]).transpose(0, 1)
    flat = grouped.reshape(t.shape)
    return flat.t().contiguous() if t.dim() == 2 else flat.contiguous()


def _qkv_from_hf(t: torch.Tensor, heads: int) -> torch.Tensor:
    rows_first = t.t() if t.dim() == 2 else t
    split = rows_first.reshape(3, heads, rows_first.shape[0] // (3 * heads), *rows_first.shape[1:]).transpose(0, 1)
    return split.reshape(rows_first.shape).contiguous()


def _to_hf(t: torch.Tensor, op: str, heads: int) -> torch.Tensor:
    if op == "transpose":
        return t.t().contiguous()
    if op == "qkv":
        return _qkv_to_hf(t, heads)
    return t.contiguous()


def _from_hf(t: torch.Tensor, op: str, heads: int) -> torch.Tensor:
    if op == "transpose":
        return t.t().contiguous()
    if op == "qkv":
        return _qkv_from_hf(t, heads)
    return t.contiguous()


def megatron_names(state: dict[str, Any]) -> dict[str, Any]:
    """A megatron-core state dict with TransformerEngine's names renamed to the local spec's, ``_extra_state``
    entries dropped."""
    te = {}
    for local, fused in TRANSFORMER_ENGINE_NAMES.items():
        for i in range(10_000):
            if fused.format(i=i) not in state:
                break
            te[fused.format(i=i)] = local.format(i=i)
    return {te.get(k, k): v for k, v in state.items() if not k.endswith("_extra_state")}


def to_hf(state: dict[str, torch.Tensor], rules: tuple[Rule, ...], layers: int, heads: int) -> dict[str, torch.Tensor]:
    """Our state dict -> Hugging Face tensors; MappingError naming a missing or unmapped tensor."""
    table = rows(rules, layers)
    optional = {"output_layer.weight"}
    mapped = {r.ours for r in table}
    extra = sorted(k for k in state if k not in mapped)
    if extra:
        raise MappingError(f"tensors the mapping does not know: {', '.join(extra[:5])}")
    out = {}
    for rule in table:
        if rule.ours not in state:
            if rule.ours in optional:
                continue
            raise MappingError(f"the checkpoint has no tensor {rule.ours}")
        out[rule.hf] = _to_hf(state[rule.ours], rule.op, heads)
    return out


def from_hf(tensors: dict[str, torch.Tensor], rules: tuple[Rule, ...], layers: int,
            heads: int) -> dict[str, torch.Tensor]:
    """Hugging Face tensors -> our state dict (the inverse of :func:`to_hf`, bit for bit)."""
    table = rows(rules, layers)
    known = {r.hf for r in table}
    extra = sorted(k for k in tensors if k not in known and k != "lm_head.weight")
    if extra:
        raise MappingError(f"tensors the mapping does not know: {', '.join(extra[:5])}")
    out = {}
    for rule in table:
        if rule.hf not in tensors:
            if rule.hf == "lm_head.weight":
                continue
            raise MappingError(f"the model has no tensor {rule.hf}")
        out[rule.ours] = _from_hf(tensors[rule.hf], rule.op, heads)
    return out


def merge_tensor_parallel(shards: list[dict[str, Any]], rules: tuple[Rule, ...], layers: int) -> dict[str, Any]:
    """megatron-core state dicts of tensor-parallel ranks (in rank order) -> one state dict: each sliced tensor
    concatenated along its axis, replicated ones taken from rank 0."""
    if len(shards) == 1:
        return dict(shards[0])
    axes = {r.ours: r.tp_axis for r in rows(rules, layers)}
    merged = {}
    for name, tensor in shards[0].items():
        axis = axes.get(name)
        merged[name] = tensor if axis is None else torch.cat([s[name] for s in shards], dim=axis)
    return merged


def split_tensor_parallel(state: dict[str, Any], rules: tuple[Rule, ...], layers: int,
                          size: int) -> list[dict[str, Any]]:
    """The inverse of :func:`merge_tensor_parallel`: ``size`` rank state dicts."""
    axes = {r.ours: r.tp_axis for r in rows(rules, layers)}
    shards: list[dict[str, Any]] = [{} for _ in range(size)]
    for name, tensor in state.items():
        axis = axes.get(name)
        parts = [tensor] * size if axis is None else torch.chunk(tensor, size, dim=axis)
        if axis is not None and tensor.shape[axis] % size:
            raise MappingError(f"{name}: {tensor.shape[axis]} rows do not split over {size} tensor-parallel ranks")
        for shard, part in zip(shards, parts, strict=True):
            shard[name] = part.clone() if axis is not None else part
    return shards


def hf_config(shape: dict[str, Any], tied: bool, eod_id: int | None) -> dict[str, Any]:
    """``config.json`` of the ``GPT2LMHeadModel`` equal to a GPT of ``shape`` (:class:`.model.Shape`'s fields)."""
    hidden = int(shape["hidden_size"])
    config: dict[str, Any] = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": int(shape["vocab_size"]), "n_positions": int(shape["seq_length"]), "n_embd": hidden,
        "n_layer": int(shape["num_layers"]), "n_head": int(shape["num_attention_heads"]),
        "n_inner": int(shape.get("ffn_hidden_size") or 4 * hidden), "activation_function": "gelu",
        "layer_norm_epsilon": LAYER_NORM_EPSILON, "initializer_range": float(shape.get("init_method_std", 0.02)),
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "summary_first_dropout": 0.0,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": tied, "use_cache": True, "dtype": "float32",
    }
    token = int(eod_id) if eod_id is not None else None  # None, not GPT-2's 50256, when the tokenizer is unknown
    config.update(bos_token_id=token, eos_token_id=token)
    return config


def shape_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """:class:`.model.Shape`'s fields from a ``config.json``; MappingError for a GPT-2 these GPTs cannot be."""
    if config.get("model_type") != "gpt2":
        raise MappingError(f"model_type {config.get('model_type')!r}: only GPT-2 models map onto these GPTs")
    checks = {"activation_function": "gelu", "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False}
    for key, wanted in checks.items():
        if config.get(key, wanted) != wanted:
            raise MappingError(f"{key} {config.get(key)!r}: these GPTs need {wanted!r}")
    if abs(float(config.get("layer_norm_epsilon", LAYER_NORM_EPSILON)) - LAYER_NORM_EPSILON) > 1e-12:
        raise MappingError(f"layer_norm_epsilon {config.get('layer_norm_epsilon')}: these GPTs use 1e-5")
    hidden = int(config["n_embd"])
    return {"num_layers": int(config["n_layer"]), "hidden_size": hidden,
            "num_attention_heads": int(config["n_head"]), "seq_length": int(config["n_positions"]),
            "vocab_size": int(config["vocab_size"]), "ffn_hidden_size": int(config.get("n_inner") or 4 * hidden),
            "init_method_std": float(config.get("initializer_range", 0.02))}
