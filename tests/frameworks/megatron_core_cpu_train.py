"""``gpt/pretrain.py``'s megatron-core training machinery (:class:`~mlrecipe_scripts.megatron.gpt.parallel.
MegatronTrainer`: megatron-core's DDP, ``get_megatron_optimizer`` and forward-backward schedule) run on CPU for a
test (``python -m tests.frameworks.megatron_core_cpu_train OUT.json FLAG...``): the flags are pretrain.py's; the
trainer's TransformerConfig, optimizer class and the losses of 4 steps on one fixed batch are written to OUT.json;
then the trainer is saved with :func:`~mlrecipe_scripts.megatron.gpt.parallel.save_dist` (megatron-core's
``torch_dist``) in OUT's folder's ``ckpt/`` and loaded into a fresh trainer, whose parameters, optimizer state and
validation loss are compared with the saved one's.

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


def _tensors(state: Any) -> Any:
    """A nested state dict's tensors as lists (for an exact comparison)."""
    if isinstance(state, dict):
        return {str(k): _tensors(v) for k, v in sorted(state.items(), key=lambda kv: str(kv[0]))}
    if isinstance(state, (list, tuple)):
        return [_tensors(v) for v in state]
    return state.tolist() if hasattr(state, "tolist") else state


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
    torch.cuda.synchronize = lambda *args, **kwargs: None  # type: ignore[assignment]
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
    valid = trainer.evaluate(batches[:1], 1)
    shape = Shape(2, 64, 2, 16, 64)
    folder = parallel.save_dist(trainer, out.parent / "ckpt", 4, {"iteration": 4, "shape": dict(shape.__dict__),
                                                                  "args": dict(vars(args)), "impl": "megatron"}, valid)
    torch.manual_seed(4)
    fresh = parallel.MegatronTrainer(shape, args, torch.device("cpu"))
    differ_before = any(not torch.equal(a, b) for a, b in zip(trainer.module.parameters(), fresh.module.parameters(),
                                                               strict=True))
    common = parallel.load_dist(fresh, folder)
    same = all(torch.equal(a, b) for a, b in zip(trainer.module.parameters(), fresh.module.parameters(), strict=True))
    old_state = trainer.optimizer.state_dict()
    new_state = fresh.optimizer.state_dict()
    out.write_text(json.dumps({
        "losses": losses, "valid": valid, "optimizer": type(trainer.optimizer).__name__, "folder": str(folder),
        "resumed": {"differ_before": differ_before, "parameters_equal": same, "iteration": common.get("iteration"),
                    "valid": fresh.evaluate(batches[:1], 1),
                    "optimizer_equal": repr(_tensors(old_state)) == repr(_tensors(new_state))},
        "inner": [type(o).__name__ for o in getattr(trainer.optimizer, "chained_optimizers", [trainer.optimizer])],
        "model": type(trainer.model).__name__, "hidden_dropout": config.hidden_dropout,
        "attention_dropout": config.attention_dropout, "tp": config.tensor_model_parallel_size,
        "pp": config.pipeline_model_parallel_size, "dp": parallel_state.get_data_parallel_world_size()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
