"""``gpt/pretrain.py``'s megatron-core training machinery (:class:`~mlrecipe_scripts.megatron.gpt.parallel.
MegatronTrainer`: megatron-core's DDP, ``get_megatron_optimizer`` and forward-backward schedule) run on CPU for a
test (``python -m tests.frameworks.megatron_core_cpu_train OUT.json FLAG...``): the flags are pretrain.py's; the
trainer's TransformerConfig, optimizer class and the losses of 4 steps on one fixed batch are written to OUT.json.

megatron-core 0.16.1 allocates a few bookkeeping tensors with ``device="cuda"`` (the optimizer's loss scale, the
attention score buffer); this helper (a test's process, never the product) puts them on the CPU, as
:mod:`tests.frameworks.megatron_core_cpu` does for the forward pass. Its ``DistributedOptimizer`` checks that
parameters are ``torch.cuda`` tensors and gradient clipping asserts CUDA gradients: those two need a GPU.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def _on_cpu(factory: Any) -> Any:
    def make(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        return factory(*args, device="cpu" if device is not None and str(device).startswith("cuda") else device,
                       **kwargs)
    return make


def main(out: Path, flags: list[str]) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel, utils

    from mlrecipe_scripts.megatron.gpt import parallel
    from mlrecipe_scripts.megatron.gpt.model import Shape
    from mlrecipe_scripts.megatron.gpt.pretrain import build_parser

    utils.GlobalMemoryBuffer.get_tensor = (  # type: ignore[method-assign]
        lambda self, shape, dtype, name, mem_alloc_context=None: torch.empty(*shape, dtype=dtype))
    tensor_parallel.random.CudaRNGStatesTracker.fork = (  # type: ignore[method-assign]
        lambda self, name="model-parallel-rng": contextlib.nullcontext())
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    for name in ("tensor", "zeros", "empty", "ones"):
        setattr(torch, name, _on_cpu(getattr(torch, name)))
    dist.init_process_group("gloo", store=dist.FileStore(tempfile.mktemp(prefix="mcore-train-"), 1), rank=0,
                            world_size=1)
    args = build_parser().parse_args(["--train-iters", "4", "--num-layers", "2", "--hidden-size", "64",
                                      "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2",
                                      "--lr", "1e-2", "--clip-grad", "0", *flags])
    layout = parallel.layout(1, args)
    parallel_state.initialize_model_parallel(layout.tensor, layout.pipeline)
    torch.manual_seed(3)
    trainer = parallel.MegatronTrainer(Shape(2, 64, 2, 16, 64), args, torch.device("cpu"))
    batches = [torch.randint(0, 64, (2, 17)) for _ in range(2)]
    losses = [trainer.step(batches, 2) / 2 for _ in range(4)]
    config = trainer.config
    out.write_text(json.dumps({
        "losses": losses, "valid": trainer.evaluate(batches[:1], 1), "optimizer": type(trainer.optimizer).__name__,
        "inner": [type(o).__name__ for o in getattr(trainer.optimizer, "chained_optimizers", [trainer.optimizer])],
        "model": type(trainer.model).__name__, "hidden_dropout": config.hidden_dropout,
        "attention_dropout": config.attention_dropout, "tp": config.tensor_model_parallel_size,
        "pp": config.pipeline_model_parallel_size, "dp": parallel_state.get_data_parallel_world_size()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
