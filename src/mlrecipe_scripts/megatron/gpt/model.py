"""The GPT models pretraining runs: megatron-core's ``GPTModel`` on GPUs, a plain-torch GPT of the same shape on CPU.

megatron-core 0.16.1 cannot run its GPT forward pass on CPU: its local-spec attention (``DotProductAttention``)
takes its score buffer from ``parallel_state.get_global_memory_buffer()``, which allocates on
``torch.cuda.current_device()`` ("Torch not compiled with CUDA enabled" on a CPU build). The plain-torch model mirrors
Megatron's GPT: learned absolute positions, pre-LayerNorm blocks, GELU MLP of 4 x hidden, final LayerNorm, output
layer tied to the word embeddings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Shape:
    """The model knobs shared by both implementations."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    vocab_size: int
    ffn_hidden_size: int | None = None
    init_method_std: float = 0.02

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size


class Block(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.heads = shape.num_attention_heads
        self.ln1 = nn.LayerNorm(shape.hidden_size)
        self.qkv = nn.Linear(shape.hidden_size, 3 * shape.hidden_size)
        self.proj = nn.Linear(shape.hidden_size, shape.hidden_size)
        self.ln2 = nn.LayerNorm(shape.hidden_size)
        self.fc1 = nn.Linear(shape.hidden_size, shape.ffn)
        self.fc2 = nn.Linear(shape.ffn, shape.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TorchGPT(nn.Module):
    """Plain-torch GPT: ``forward(tokens) -> logits [batch, seq, vocab]``. Its output layer is the word embeddings
    (tied), or with ``untied_output`` a separate ``output.weight`` as megatron-core's ``GPTModel`` has (its
    ``output_layer``), so a megatron-core checkpoint's weights run here unchanged (``gpt/evaluate.py``)."""

    def __init__(self, shape: Shape, untied_output: bool = False) -> None:
        super().__init__()
        self.embedding = nn.Embedding(shape.vocab_size, shape.hidden_size)
        self.position = nn.Embedding(shape.seq_length, shape.hidden_size)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.num_layers))
        self.final_ln = nn.LayerNorm(shape.hidden_size)
        self.output = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False) if untied_output else None
        std, out_std = shape.init_method_std, shape.init_method_std / math.sqrt(2.0 * shape.num_layers)
        for name, param in self.named_parameters():
            if param.dim() == 2:
                nn.init.normal_(param, std=out_std if name.endswith(("proj.weight", "fc2.weight")) else std)
            elif name.endswith("bias"):
                nn.init.zeros_(param)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embedding(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.final_ln(x), self.embedding.weight if self.output is None else self.output.weight)


def lm_loss(model: nn.Module, batch: torch.Tensor, megatron: bool = False) -> torch.Tensor:
    """Mean next-token cross-entropy of a ``[b, seq + 1]`` token batch."""
    inputs, labels = batch[:, :-1], batch[:, 1:]
    if megatron:
        positions = torch.arange(inputs.shape[1], device=inputs.device).unsqueeze(0).expand_as(inputs)
        return model(inputs, positions, None, labels=labels).float().mean()
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def megatron_config(shape: Shape, bf16: bool, tensor_parallel: int = 1, pipeline_parallel: int = 1,
                    hidden_dropout: float = 0.0, attention_dropout: float = 0.0) -> Any:
    """megatron-core's ``TransformerConfig`` for ``shape`` (builds on CPU; no process group needed)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=shape.num_layers, hidden_size=shape.hidden_size, num_attention_heads=shape.num_attention_heads,
        ffn_hidden_size=shape.ffn, init_method_std=shape.init_method_std, bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        pipeline_dtype=(torch.bfloat16 if bf16 else torch.float32) if pipeline_parallel > 1 or bf16 else None,
        tensor_model_parallel_size=tensor_parallel, pipeline_model_parallel_size=pipeline_parallel,
        hidden_dropout=hidden_dropout, attention_dropout=attention_dropout)


def megatron_gpt(shape: Shape, bf16: bool, config: Any = None, pre_process: bool = True,
                 post_process: bool = True) -> Any:
    """megatron-core's GPTModel (TransformerEngine's layer spec when it imports, else the local spec) on this GPU;
    model-parallel state must be initialized. ``pre_process``/``post_process``: this pipeline stage holds the
    embedding / the output layer."""
    from megatron.core.models.gpt import GPTModel, gpt_layer_specs

    try:
        import transformer_engine  # noqa: F401
        spec = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    except ImportError:
        spec = gpt_layer_specs.get_gpt_layer_local_spec()
    return GPTModel(config=config or megatron_config(shape, bf16), transformer_layer_spec=spec,
                    vocab_size=shape.vocab_size, max_sequence_length=shape.seq_length,
                    position_embedding_type="learned_absolute", pre_process=pre_process, post_process=post_process)
