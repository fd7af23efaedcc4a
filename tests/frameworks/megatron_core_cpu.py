"""megatron-core's ``GPTModel`` run on CPU for the export's parity test (``python -m tests.frameworks.megatron_core_cpu
OUT``): builds the model pretraining builds (local layer spec, learned positions, untied output layer), every
parameter perturbed so that none is at its initial 0 or 1, writes it as a pretraining checkpoint (``impl: megatron``)
in ``OUT/ckpt`` and in megatron-core's distributed-checkpoint format (``torch_dist``, as Megatron-LM saves it: the
model's sharded state dict under ``model``, its ``args`` and ``iteration``) in ``OUT/dist``, and its logits for fixed
tokens in ``OUT/logits.pt``.

megatron-core 0.16.1's forward pass has three CUDA-only calls that have nothing to do with the model's arithmetic;
this helper (a test's process, never the product) replaces them: the attention score buffer is allocated on CPU
(``GlobalMemoryBuffer.get_tensor``), the causal mask is passed explicitly (its default mask is built with
``device="cuda"``), and the dropout RNG fork (dropout is 0) is a no-op. Saving the distributed checkpoint calls
``torch.cuda.synchronize`` and puts its one-number failure flag on ``torch.cuda.current_device()``: after the forward
pass, those two are pointed at the CPU too.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

SHAPE: dict[str, Any] = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "seq_length": 32,
                         "vocab_size": 128, "ffn_hidden_size": 256, "init_method_std": 0.02}
BATCH, TOKENS = 2, 24


def main(out: Path) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel, utils
    from megatron.core.models.gpt import GPTModel, gpt_layer_specs
    from megatron.core.transformer.transformer_config import TransformerConfig

    from mlrecipe_scripts.megatron.gpt import checkpoint

    def cpu_buffer(self: object, shape: tuple[int, ...], dtype: torch.dtype, name: str,
                   mem_alloc_context: object = None) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype)

    utils.GlobalMemoryBuffer.get_tensor = cpu_buffer  # type: ignore[method-assign]
    tensor_parallel.random.CudaRNGStatesTracker.fork = (  # type: ignore[method-assign]
        lambda self, name="model-parallel-rng": contextlib.nullcontext())
    dist.init_process_group("gloo", store=dist.FileStore(tempfile.mktemp(prefix="mcore-cpu-"), 1), rank=0,
                            world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(7)
    config = TransformerConfig(num_layers=SHAPE["num_layers"], hidden_size=SHAPE["hidden_size"],
                               num_attention_heads=SHAPE["num_attention_heads"],
                               ffn_hidden_size=SHAPE["ffn_hidden_size"], init_method_std=SHAPE["init_method_std"],
                               use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0)
    model = GPTModel(config=config, transformer_layer_spec=gpt_layer_specs.get_gpt_layer_local_spec(),
                     vocab_size=SHAPE["vocab_size"], max_sequence_length=SHAPE["seq_length"],
                     position_embedding_type="learned_absolute").eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
        tokens = torch.randint(0, SHAPE["vocab_size"], (BATCH, TOKENS))
        positions = torch.arange(TOKENS).unsqueeze(0).expand(BATCH, TOKENS)
        mask = torch.triu(torch.ones(TOKENS, TOKENS), diagonal=1).bool()[None, None]
        logits = model(tokens, positions, mask)
    checkpoint.save(out / "ckpt", 1, {"model": model.state_dict(), "impl": "megatron", "shape": SHAPE, "args": {},
                                      "iteration": 1})
    torch.save({"tokens": tokens, "logits": logits.float()}, out / "logits.pt")
    _save_torch_dist(model, out / "dist")
    dist.destroy_process_group()


def _save_torch_dist(model: object, root: Path) -> None:
    import torch
    from megatron.core import dist_checkpointing

    torch.cuda.synchronize = lambda *args, **kwargs: None  # type: ignore[assignment]
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    args = argparse.Namespace(**{k: v for k, v in SHAPE.items() if k != "vocab_size"}, max_position_embeddings=
                              SHAPE["seq_length"], position_embedding_type="learned_absolute",
                              padded_vocab_size=SHAPE["vocab_size"])
    folder = root / "iter_0000001"
    folder.mkdir(parents=True)
    state = {"model": model.sharded_state_dict(), "args": args, "iteration": 1}  # type: ignore[attr-defined]
    dist_checkpointing.save(state, str(folder))
    (root / "latest_checkpointed_iteration.txt").write_text("1")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
