"""Stand-in for neuronx-distributed's ``examples/training/llama/modeling_llama_nxd.py`` (Llama built from
neuronx-distributed's tensor-parallel layers), which the recipe copies next to the pretraining script; the script
imports ``CoreAttention``, ``LlamaForCausalLM`` and ``init_weights`` from it. Here the names exist so that the
import succeeds only where the copy was made; no model is built (Neuron's XLA device is not here)."""

from __future__ import annotations


class CoreAttention:
    """The attention core the real script checkpoints selectively."""


class LlamaForCausalLM:
    """The tensor-parallel Llama (not built here)."""


def init_weights(*_args: object) -> None:
    """The real module's weight initialisation for meta-device init (nothing here)."""
