"""Model parallelism and megatron-core's training machinery for ``gpt/pretrain.py``'s megatron-core path (GPU).

The flags are Megatron-LM's ``pretrain_gpt.py`` names: ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--use-distributed-optimizer``, ``--hidden-dropout``, ``--attention-dropout``.
On the megatron-core path they go into ``parallel_state.initialize_model_parallel(tp, pp)``, the ``GPTModel``'s
``TransformerConfig``, megatron-core's ``DistributedDataParallel`` and ``get_megatron_optimizer`` (its
``DistributedOptimizer`` with ``--use-distributed-optimizer``); a step runs through megatron-core's
forward-backward schedule (``get_forward_backward_func``: pipelined when pp > 1). The data-parallel size is
world / (tp x pp). The plain-torch path (CPU) has none of them: any value but the default is refused before
anything starts.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# flag -> (argparse dest, default): what the plain-torch path accepts only at its default
MEGATRON_ONLY = {"--tensor-model-parallel-size": ("tensor_model_parallel_size", 1),
                 "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", 1),
                 "--use-distributed-optimizer": ("use_distributed_optimizer", False),
                 "--hidden-dropout": ("hidden_dropout", 0.0),
                 "--attention-dropout": ("attention_dropout", 0.0)}


class FlagError(Exception):
    """A flag this run cannot honour: one ``error:`` line, exit status 2, nothing started or written."""


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """The parallelism and dropout flags, Megatron-LM's names."""
    group.add_argument("--tensor-model-parallel-size", type=int, default=1,
                       help="tensor-parallel ranks per model (megatron-core path)")
    group.add_argument("--pipeline-model-parallel-size", type=int, default=1,
                       help="pipeline stages per model (megatron-core path; --num-layers must divide by it)")
    group.add_argument("--use-distributed-optimizer", action="store_true",
                       help="shard the optimizer state over the data-parallel ranks (megatron-core path)")
    group.add_argument("--hidden-dropout", type=float, default=0.0,
                       help="dropout after attention and MLP (megatron-core path; Megatron-LM's default is 0.1)")
    group.add_argument("--attention-dropout", type=float, default=0.0,
                       help="dropout of the attention probabilities (megatron-core path; Megatron-LM's default: 0.1)")


def plain_path_refusal(args: argparse.Namespace) -> str | None:
    """The first megatron-core-only flag given a value other than its default, as one message; None when none."""
    for flag, (dest, default) in MEGATRON_ONLY.items():
        value = getattr(args, dest)
        if value != default:
            return (f"{flag} {value}: needs the megatron-core path (--impl megatron on a GPU); the plain-torch GPT "
                    f"(CPU) supports only {default}")
    return None


@dataclass(frozen=True)
class Layout:
    """How ``world`` ranks split: ``tensor`` x ``pipeline`` model-parallel ranks, ``data`` replicas of that."""

    tensor: int
    pipeline: int
    data: int


def layout(world: int, args: argparse.Namespace) -> Layout:
    """The ranks' split, or FlagError when the sizes do not fit the world or the model."""
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    for flag, value in (("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp)):
        if value < 1:
            raise FlagError(f"{flag} {value}: must be at least 1")
    for flag, value in (("--hidden-dropout", args.hidden_dropout), ("--attention-dropout", args.attention_dropout)):
        if not 0.0 <= value < 1.0:
            raise FlagError(f"{flag} {value}: must be in [0, 1)")
    if world % (tp * pp):
        raise FlagError(f"world size {world} is not divisible by --tensor-model-parallel-size {tp} x "
                        f"--pipeline-model-parallel-size {pp} = {tp * pp}")
    if args.num_attention_heads % tp:
        raise FlagError(f"--num-attention-heads {args.num_attention_heads} is not divisible by "
                        f"--tensor-model-parallel-size {tp}")
    if args.num_layers % pp:
        raise FlagError(f"--num-layers {args.num_layers} is not divisible by --pipeline-model-parallel-size {pp}")
    return Layout(tp, pp, world // (tp * pp))


def ddp_config(args: argparse.Namespace) -> Any:
    """megatron-core's ``DistributedDataParallelConfig`` for this run."""
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                         use_distributed_optimizer=args.use_distributed_optimizer)


def optimizer_config(args: argparse.Namespace) -> Any:
    """megatron-core's ``OptimizerConfig``: Adam with decoupled weight decay, the script's betas and clipping."""
    import torch
    from megatron.core.optimizer import OptimizerConfig

    return OptimizerConfig(optimizer="adam", lr=args.lr, min_lr=args.min_lr, weight_decay=args.weight_decay,
                           adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, clip_grad=args.clip_grad,
                           bf16=args.bf16, params_dtype=torch.bfloat16 if args.bf16 else torch.float32,
                           use_distributed_optimizer=args.use_distributed_optimizer)


class MegatronTrainer:
    """megatron-core's GPT on this rank's pipeline stage, wrapped in its DDP, with its optimizer and schedule.

    ``initialize_model_parallel`` must have run. ``step`` and ``evaluate`` take an iterator of ``[micro batch,
    seq + 1]`` token tensors (every rank of a data-parallel replica reads the same ones) and return the summed
    per-micro-batch mean loss of this rank (0 on ranks that are not the last pipeline stage)."""

    def __init__(self, shape: Any, args: argparse.Namespace, device: Any) -> None:
        from megatron.core import parallel_state
        from megatron.core.distributed import DistributedDataParallel, finalize_model_grads
        from megatron.core.optimizer import get_megatron_optimizer

        from mlrecipe_scripts.megatron.gpt.model import megatron_config, megatron_gpt

        self.config = megatron_config(shape, args.bf16, args.tensor_model_parallel_size,
                                      args.pipeline_model_parallel_size, args.hidden_dropout, args.attention_dropout)
        self.last_stage = parallel_state.is_pipeline_last_stage()
        self.module = megatron_gpt(shape, args.bf16, self.config, parallel_state.is_pipeline_first_stage(),
                                   self.last_stage).to(device)
        self.model = DistributedDataParallel(self.config, ddp_config(args), self.module)
        self.optimizer = get_megatron_optimizer(optimizer_config(args), [self.model])
        self.config.finalize_model_grads_func = finalize_model_grads
        self.config.no_sync_func = self.model.no_sync
        self.config.grad_scale_func = self.optimizer.scale_loss
        self.seq_length, self.micro_batch = shape.seq_length, args.micro_batch_size

    def _forward_step(self, data: Any, model: Any) -> Any:
        import torch

        tokens = next(data)
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        positions = torch.arange(inputs.shape[1], device=inputs.device).unsqueeze(0).expand_as(inputs)
        output = model(inputs, positions, None, labels=labels)

        def loss(per_token: Any) -> tuple[Any, dict[str, Any]]:
            value = per_token.float().mean()
            return value, {"lm loss": value.detach().clone()}  # the schedule divides value in place

        return output, loss

    def _run(self, batches: Any, micro_batches: int, forward_only: bool) -> float:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        losses = get_forward_backward_func()(
            forward_step_func=self._forward_step, data_iterator=iter(batches), model=[self.model],
            num_microbatches=micro_batches, seq_length=self.seq_length, micro_batch_size=self.micro_batch,
            forward_only=forward_only)
        return float(sum(float(item["lm loss"]) for item in losses)) if self.last_stage else 0.0

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, batches: Any, micro_batches: int) -> float:
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        value = self._run(batches, micro_batches, forward_only=False)
        self.optimizer.step()
        return value

    def evaluate(self, batches: Any, micro_batches: int) -> float:
        import torch

        self.model.eval()
        with torch.no_grad():
            value = self._run(batches, micro_batches, forward_only=True)
        self.model.train()
        return value


def save_dist(trainer: MegatronTrainer, root: Path, iteration: int, common: dict[str, Any],
              validation_loss: float | None = None) -> Path:
    """Every rank writes its shards of the model and optimizer (megatron-core's ``dist_checkpointing``,
    ``torch_dist``) into one temporary folder; rank 0 then moves it into place as ``iter_NNNNNNN`` and points the
    tracker at it. ``common`` (iteration, args, shape) goes to ``common.pt``. Call on every rank."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    from mlrecipe_scripts.megatron.gpt import checkpoint

    tmp = root / f".{checkpoint.folder(root, iteration).name}.tmp-dist"
    if dist.get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    model = trainer.module.sharded_state_dict()
    dist_checkpointing.save({"model": model, "optimizer": trainer.optimizer.sharded_state_dict(model), **common},
                            str(tmp))
    dist.barrier()
    final = checkpoint.commit(root, tmp, iteration, validation_loss) if dist.get_rank() == 0 else \
        checkpoint.folder(root, iteration)
    dist.barrier()
    return final


def load_dist(trainer: MegatronTrainer, folder: Path) -> dict[str, Any]:
    """Load a :func:`save_dist` checkpoint into this rank's model and optimizer; its common items."""
    from megatron.core import dist_checkpointing

    model = trainer.module.sharded_state_dict()
    template = {"model": model, "optimizer": trainer.optimizer.sharded_state_dict(model, is_loading=True)}
    state = dist_checkpointing.load(template, str(folder))
    trainer.module.load_state_dict(state.pop("model"))
    trainer.optimizer.load_state_dict(state.pop("optimizer"))
    return state
