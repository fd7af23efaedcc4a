"""The export's weight mapping (``mlrecipe_scripts.megatron.gpt.hf_mapping``): the table in the docs is the code's,
the fused-QKV regrouping and the tensor-parallel split are exact inverses, and a state dict the mapping does not
know is refused by name. (Parity with real models: ``tests/frameworks/test_megatron_export.py``.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from mlrecipe_scripts.megatron.gpt import hf_mapping  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "framework-scripts.md"


def _names(cell: str) -> list[str]:
    """The tensor names of one table cell: ``a.{weight,bias}``, ``a.weight`` / ``.bias``, or one name; none for a
    note in parentheses (``(tied to ...)``), and a parenthesized alias after the name is not read."""
    names = re.findall(r"`([^`]+)`", cell.strip().split("(")[0])
    out: list[str] = []
    for name in names:
        if name.startswith(".") and out:
            out.append(out[-1].rsplit(".", 1)[0] + name)
        elif m := re.fullmatch(r"(.*)\.\{(\w+),(\w+)\}", name):
            out += [f"{m.group(1)}.{m.group(2)}", f"{m.group(1)}.{m.group(3)}"]
        else:
            out.append(name)
    return out


def _docs_pairs() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    section = DOCS.read_text().split("### The export's mapping")[1].split("\n\n")
    table = next(block for block in section if block.startswith("| plain-torch GPT"))
    torch_pairs, megatron_pairs = set(), set()
    for line in table.splitlines()[2:]:
        ours, megatron, hf = (_names(c) for c in line.split("|")[1:4])
        torch_pairs |= set(zip(ours, hf, strict=False))
        megatron_pairs |= set(zip(megatron, hf, strict=True))
    return torch_pairs, megatron_pairs


def test_the_docs_table_is_the_code_table() -> None:
    torch_pairs, megatron_pairs = _docs_pairs()
    assert torch_pairs == {(r.ours, r.hf) for r in hf_mapping.TORCH_GPT}
    assert megatron_pairs == {(r.ours, r.hf) for r in hf_mapping.MEGATRON_GPT}


def test_fused_qkv_regrouping_and_tensor_parallel_split_are_exact_inverses() -> None:
    layers, heads, hidden = 2, 4, 32
    state = {name: torch.randn(*shape) for name, shape in _megatron_shapes(layers, hidden).items()}
    hf = hf_mapping.to_hf(state, hf_mapping.MEGATRON_GPT, layers, heads)
    qkv = state["decoder.layers.1.self_attention.linear_qkv.weight"]
    head_dim = hidden // heads
    # head 2's k rows in megatron-core's per-head grouping are GPT-2's k columns of head 2
    assert torch.equal(hf["transformer.h.1.attn.c_attn.weight"][:, hidden + 2 * head_dim:hidden + 3 * head_dim],
                       qkv[(2 * 3 + 1) * head_dim:(2 * 3 + 2) * head_dim].t())
    back = hf_mapping.from_hf(hf, hf_mapping.MEGATRON_GPT, layers, heads)
    assert list(back) == list(state) and all(torch.equal(back[k], state[k]) for k in state)
    shards = hf_mapping.split_tensor_parallel(state, hf_mapping.MEGATRON_GPT, layers, 2)
    assert shards[1]["decoder.layers.0.mlp.linear_fc2.weight"].shape == (hidden, 2 * hidden)
    merged = hf_mapping.merge_tensor_parallel(shards, hf_mapping.MEGATRON_GPT, layers)
    assert all(torch.equal(merged[k], state[k]) for k in state)


def test_a_tensor_the_mapping_does_not_know_is_refused_by_name() -> None:
    state = {name: torch.zeros(*shape) for name, shape in _megatron_shapes(1, 8).items()}
    with pytest.raises(hf_mapping.MappingError, match=r"does not know: decoder\.layers\.0\.self_attention\.q_norm"):
        hf_mapping.to_hf({**state, "decoder.layers.0.self_attention.q_norm.weight": torch.zeros(8)},
                         hf_mapping.MEGATRON_GPT, 1, 2)
    del state["decoder.final_layernorm.bias"]
    with pytest.raises(hf_mapping.MappingError, match=r"no tensor decoder\.final_layernorm\.bias"):
        hf_mapping.to_hf(state, hf_mapping.MEGATRON_GPT, 1, 2)
    with pytest.raises(hf_mapping.MappingError, match="activation_function 'gelu_new'"):
        hf_mapping.shape_from_config({"model_type": "gpt2", "activation_function": "gelu_new", "n_embd": 8})


def _megatron_shapes(layers: int, hidden: int) -> dict[str, tuple[int, ...]]:
    vocab, ffn = 64, 4 * hidden
    shapes: dict[str, tuple[int, ...]] = {"embedding.word_embeddings.weight": (vocab, hidden),
                                          "embedding.position_embeddings.weight": (16, hidden)}
    for i in range(layers):
        p = f"decoder.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (hidden,), p + "input_layernorm.bias": (hidden,),
                       p + "self_attention.linear_qkv.weight": (3 * hidden, hidden),
                       p + "self_attention.linear_qkv.bias": (3 * hidden,),
                       p + "self_attention.linear_proj.weight": (hidden, hidden),
                       p + "self_attention.linear_proj.bias": (hidden,),
                       p + "pre_mlp_layernorm.weight": (hidden,), p + "pre_mlp_layernorm.bias": (hidden,),
                       p + "mlp.linear_fc1.weight": (ffn, hidden), p + "mlp.linear_fc1.bias": (ffn,),
                       p + "mlp.linear_fc2.weight": (hidden, ffn), p + "mlp.linear_fc2.bias": (hidden,)})
    shapes.update({"decoder.final_layernorm.weight": (hidden,), "decoder.final_layernorm.bias": (hidden,),
                   "output_layer.weight": (vocab, hidden)})
    return shapes
