"""``gpt/pretrain.py``: GPT pretraining from Megatron ``.bin/.idx`` data, with the NeMo-Megatron launcher's knobs.

Data: ``--data-manifest <data-dir>/manifest.json`` (every prepared prefix, weighted by tokens; a missing or partial
manifest is refused) or ``--data-path`` as Megatron takes it (``PREFIX`` or ``W1 PREFIX1 W2 PREFIX2``), split by
``--split`` (train,valid,test by document).

What runs where (``--impl auto``): on GPUs with megatron-core, its ``GPTModel`` (TransformerEngine's layer spec when
it imports, else the local spec) fed by its ``GPTDataset`` (blended, built by ``BlendedMegatronDatasetBuilder``); on
CPU a plain-torch GPT of the same shape fed by :mod:`.samples` (megatron-core's GPT cannot run its forward pass on
CPU, see :mod:`.model`). The first line of the log says which. Data parallel over every rank of ``torchrun`` (gloo
on CPU, NCCL on GPUs); ``--global-batch-size`` = micro batch x ranks x accumulation steps.

Writes: ``$MLRECIPE_METRICS_FILE`` (JSON lines ``{"time", "step", "total", "metrics": {"loss", "lr", ...}}``),
TensorBoard events in ``--tensorboard-dir``, a checkpoint every ``--save-interval`` steps and at the end in
``--save`` (Megatron's ``iter_NNNNNNN`` layout); with ``--load`` (default: ``--save``) it resumes from the newest
complete checkpoint, at the same step, sample and learning rate (so ``kill -9`` loses at most one interval).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.progress import report_progress
from mlrecipe_scripts.core.script_core import ScriptError, offline_defaults, run_main
from mlrecipe_scripts.megatron.gpt import parallel


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpt/pretrain.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    model = p.add_argument_group("model")
    model.add_argument("--num-layers", type=int, default=2)
    model.add_argument("--hidden-size", type=int, default=128)
    model.add_argument("--num-attention-heads", type=int, default=4)
    model.add_argument("--ffn-hidden-size", type=int, help="default: 4 x hidden size")
    model.add_argument("--seq-length", type=int, default=128)
    model.add_argument("--vocab-size", type=int, help="default: the manifest's tokenizer vocabulary")
    model.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    model.add_argument("--init-method-std", type=float, default=0.02)
    model.add_argument("--bf16", action="store_true", help="bf16 parameters (GPU)")
    parallel.add_arguments(p.add_argument_group("parallelism and dropout (megatron-core path, GPU)"))
    train = p.add_argument_group("training")
    train.add_argument("--micro-batch-size", type=int, default=4)
    train.add_argument("--global-batch-size", type=int, help="default: micro batch x data-parallel ranks")
    train.add_argument("--train-iters", type=int, required=True)
    train.add_argument("--lr", type=float, default=3e-4)
    train.add_argument("--min-lr", type=float, default=0.0)
    train.add_argument("--lr-warmup-iters", type=int, default=0)
    train.add_argument("--lr-decay-iters", type=int, help="default: --train-iters")
    train.add_argument("--lr-decay-style", default="cosine", choices=("constant", "linear", "cosine"))
    train.add_argument("--weight-decay", type=float, default=0.01)
    train.add_argument("--adam-beta1", type=float, default=0.9)
    train.add_argument("--adam-beta2", type=float, default=0.95)
    train.add_argument("--clip-grad", type=float, default=1.0)
    train.add_argument("--seed", type=int, default=1234)
    train.add_argument("--impl", default="auto", choices=("auto", "megatron", "torch"),
                       help="auto: megatron-core's GPT on GPUs, the plain-torch GPT on CPU")
    train.add_argument("--dataset", default="auto", choices=("auto", "megatron", "builtin"),
                       help="auto: megatron-core's GPTDataset with --impl megatron, else the built-in sampler")
    data = p.add_argument_group("data")
    data.add_argument("--data-path", nargs="+", help="PREFIX, or a blend 'W1 PREFIX1 W2 PREFIX2 ...'")
    data.add_argument("--data-manifest", help="the data step's manifest.json (every prefix, weighted by tokens)")
    data.add_argument("--data-dir", help="folder of relative --data-path prefixes")
    data.add_argument("--split", default="98,1,1", help="train,valid,test shares of each dataset's documents")
    data.add_argument("--data-cache-path", help="megatron-core's dataset index cache (default: <save>/data-cache)")
    out = p.add_argument_group("checkpoints and logs")
    out.add_argument("--save", help="checkpoint folder")
    out.add_argument("--load", help="resume from this folder's newest checkpoint (default: --save)")
    out.add_argument("--save-interval", type=int, default=0, help="steps between checkpoints (0: only at the end)")
    out.add_argument("--eval-interval", type=int, default=0, help="steps between validations (0: only at the end)")
    out.add_argument("--eval-iters", type=int, default=4, help="micro batches per rank per validation")
    out.add_argument("--log-interval", type=int, default=10)
    out.add_argument("--tensorboard-dir")
    out.add_argument("--keep-last", type=int, default=0, metavar="N",
                     help="after each save keep only the newest N checkpoints (0: keep every one)")
    out.add_argument("--keep-best", type=int, default=0, metavar="N",
                     help="after each save keep the N checkpoints of lowest validation loss, and the newest "
                          "(0: off; with --keep-last, the union is kept); needs a validation at every save")
    out.add_argument("--exit-on-missing-checkpoint", action="store_true",
                     help="refuse to start from scratch when --load holds no checkpoint")
    return p


def learning_rate(args: argparse.Namespace, step: int) -> float:
    """Megatron's schedule: linear warmup from 0, then constant / linear / cosine decay to ``--min-lr``."""
    if args.lr_warmup_iters and step < args.lr_warmup_iters:
        return args.lr * (step + 1) / args.lr_warmup_iters
    if args.lr_decay_style == "constant":
        return args.lr
    decay = max((args.lr_decay_iters or args.train_iters) - args.lr_warmup_iters, 1)
    ratio = min(max(step - args.lr_warmup_iters, 0) / decay, 1.0)
    coeff = 1.0 - ratio if args.lr_decay_style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return args.min_lr + coeff * (args.lr - args.min_lr)


def resolve_blend(args: argparse.Namespace) -> Any:
    from mlrecipe_scripts.megatron.gpt.blend import parse_data_path, read_manifest

    if bool(args.data_path) == bool(args.data_manifest):
        raise ScriptError("give exactly one of --data-path and --data-manifest")
    return read_manifest(args.data_manifest) if args.data_manifest else parse_data_path(args.data_path, args.data_dir)


def check_retention(args: argparse.Namespace) -> None:
    """``--keep-last``/``--keep-best`` refused (FlagError) when negative, or when a save would have no validation
    loss to rank it by."""
    from mlrecipe_scripts.megatron.gpt.samples import parse_split

    for flag, value in (("--keep-last", args.keep_last), ("--keep-best", args.keep_best)):
        if value < 0:
            raise parallel.FlagError(f"{flag} {value}: must be 0 (keep every checkpoint) or positive")
    if not args.keep_best:
        return
    if args.save_interval and (not args.eval_interval or args.save_interval % args.eval_interval):
        raise parallel.FlagError(f"--keep-best {args.keep_best}: every save needs a validation: --save-interval "
                                 f"{args.save_interval} must be a multiple of --eval-interval {args.eval_interval}")
    try:
        no_valid = parse_split(args.split)[1] <= 0
    except ScriptError:
        return  # the split's own error comes later
    if no_valid:
        raise parallel.FlagError(f"--keep-best {args.keep_best}: --split {args.split} leaves no validation data")


def vocab_size(args: argparse.Namespace, blend: Any) -> int:
    size = args.vocab_size or blend.vocab_size
    if not size:
        manifest = Path(blend.prefixes[0]).parent / "manifest.json"
        if manifest.is_file():
            size = json.loads(manifest.read_text()).get("tokenizer", {}).get("vocab_size")
    if not size:
        raise ScriptError("--vocab-size is needed (no manifest beside the data names the tokenizer's vocabulary)")
    step = max(args.make_vocab_size_divisible_by, 1)
    return -(-int(size) // step) * step


class Run:
    """One pretraining process: its rank, model, optimizer, data and the loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        import torch.distributed as dist

        self.args, self.torch, self.dist = args, torch, dist
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.cuda = torch.cuda.is_available()
        if args.impl == "megatron" and not self.cuda:
            raise ScriptError("--impl megatron needs a GPU: megatron-core's GPT cannot run its forward pass on CPU")
        self.impl = args.impl if args.impl != "auto" else ("megatron" if self.cuda and _has_megatron() else "torch")
        if self.impl == "megatron":
            self.layout = parallel.layout(self.world, args)
        elif (refusal := parallel.plain_path_refusal(args)) is not None:
            raise parallel.FlagError(refusal)
        else:
            self.layout = parallel.Layout(1, 1, self.world)
        self.dp, self.dp_rank = self.layout.data, self.rank
        check_retention(args)
        self.validated: dict[int, float] = {}
        self.device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if self.cuda else "cpu")
        self.mb = args.micro_batch_size
        self.gb = args.global_batch_size or self.mb * self.dp
        if self.gb % (self.mb * self.dp):
            raise ScriptError(f"--global-batch-size {self.gb} is not a multiple of micro batch {self.mb} x "
                              f"{self.dp} data-parallel ranks")
        self.accum = self.gb // (self.mb * self.dp)
        self.trainer: parallel.MegatronTrainer | None = None
        self.blend = resolve_blend(args)

    def log(self, message: str) -> None:
        if self.rank == 0:
            print(message, flush=True)

    def setup(self) -> None:
        torch, args = self.torch, self.args
        if self.cuda:
            torch.cuda.set_device(self.device)
        backend = "nccl" if self.cuda else "gloo"
        if self.world > 1 and not self.dist.is_initialized():
            self.dist.init_process_group(backend)
        elif not self.dist.is_initialized() and (self.impl == "megatron" or args.dataset == "megatron"):
            import tempfile  # megatron-core asks for a process group even for one process

            store = self.dist.FileStore(tempfile.mktemp(prefix="pretrain-store-"), 1)
            self.dist.init_process_group(backend, store=store, rank=0, world_size=1)
        torch.manual_seed(args.seed)
        from mlrecipe_scripts.megatron.gpt.model import Shape, TorchGPT

        self.shape = Shape(args.num_layers, args.hidden_size, args.num_attention_heads, args.seq_length,
                           vocab_size(args, self.blend), args.ffn_hidden_size, args.init_method_std)
        if self.impl == "megatron":
            from megatron.core import parallel_state, tensor_parallel

            parallel_state.initialize_model_parallel(self.layout.tensor, self.layout.pipeline)
            tensor_parallel.model_parallel_cuda_manual_seed(args.seed)
            self.dp_rank = parallel_state.get_data_parallel_rank()
            self.trainer = parallel.MegatronTrainer(self.shape, args, self.device)
            model = self.trainer.module
            what = (f"megatron-core GPTModel (tensor parallel {self.layout.tensor}, pipeline parallel "
                    f"{self.layout.pipeline}, {'distributed' if args.use_distributed_optimizer else 'replicated'} "
                    f"optimizer, dropout {args.hidden_dropout}/{args.attention_dropout})")
        else:
            model = TorchGPT(self.shape).to(self.device)
            what = "plain-torch GPT (megatron-core's GPT needs a GPU)" if not self.cuda else "plain-torch GPT"
        self.model = model
        self.autocast = self.cuda and self.impl == "torch" and args.bf16  # megatron-core's GPT casts itself
        if self.trainer is not None:
            self.ddp, self.optimizer = self.trainer.model, self.trainer.optimizer
        else:
            self.ddp = (torch.nn.parallel.DistributedDataParallel(model, device_ids=[self.device.index] if self.cuda
                                                                  else None) if self.world > 1 else model)
            decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
            rest = [p for n, p in model.named_parameters() if p.dim() < 2]
            self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                                {"params": rest, "weight_decay": 0.0}], lr=args.lr,
                                               betas=(args.adam_beta1, args.adam_beta2), fused=self.cuda or None)
        params = sum(p.numel() for p in model.parameters())
        self.data_kind = args.dataset if args.dataset != "auto" else ("megatron" if self.impl == "megatron"
                                                                     else "builtin")
        self.log(f"model: {what}; {params / 1e6:.2f} M parameters, vocabulary {self.shape.vocab_size}; dataset: "
                 f"{'megatron-core GPTDataset' if self.data_kind == 'megatron' else 'built-in GPT sampler'}; "
                 f"{self.dp} data-parallel rank(s) on {self.device.type}, micro batch {self.mb}, global batch "
                 f"{self.gb} ({self.accum} accumulation step(s))")
        self.log("data: " + ", ".join(f"{w:.3f} {p}" for p, w in zip(self.blend.prefixes, self.blend.weights,
                                                                       strict=True)))
        self.build_data()

    def build_data(self) -> None:
        args = self.args
        train_count = args.train_iters * self.gb
        valid_count = self.mb * self.world * max(args.eval_iters, 1)
        if self.data_kind == "megatron":
            from mlrecipe_scripts.megatron.gpt.megatron_data import build

            self.train, self.valid = build(args, self.blend, self.shape, train_count, valid_count,
                                           args.data_cache_path or str(Path(args.save or ".") / "data-cache"))
            return
        from mlrecipe_scripts.megatron.gpt.samples import BlendedSamples, parse_split

        split = parse_split(args.split)
        self.train = BlendedSamples(self.blend.prefixes, self.blend.weights, split, "train", args.seq_length,
                                    args.seed, train_count)
        self.valid = (BlendedSamples(self.blend.prefixes, self.blend.weights, split, "valid", args.seq_length,
                                     args.seed + 1000, valid_count) if split[1] > 0 else None)

    def batch(self, source: Any, start: int) -> Any:
        return self.torch.from_numpy(source.batch(start, self.mb)).to(self.device, non_blocking=True)

    def loss(self, tokens: Any) -> Any:
        from mlrecipe_scripts.megatron.gpt.model import lm_loss

        if not self.autocast:
            return lm_loss(self.ddp, tokens, megatron=self.impl == "megatron")
        with self.torch.autocast("cuda", dtype=self.torch.bfloat16):
            return lm_loss(self.ddp, tokens)

    def resume(self) -> int:
        from mlrecipe_scripts.megatron.gpt import checkpoint

        root = self.args.load or self.args.save
        iteration = checkpoint.latest(Path(root)) if root else None
        if iteration is None:
            if self.args.exit_on_missing_checkpoint:
                raise ScriptError(f"--load {root}: no checkpoint to resume from")
            return 0
        where = checkpoint.folder(Path(root), iteration)
        if checkpoint.is_dist(where):
            if self.trainer is None:
                raise ScriptError(f"{where}: a megatron-core distributed checkpoint; resume it on the megatron-core "
                                  "path (--impl megatron, GPUs)")
            parallel.load_dist(self.trainer, where)
            self.log(f"resumed from {where} at step {iteration}")
            return iteration
        state = checkpoint.load(Path(root), iteration)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.torch.set_rng_state(state["rng"])
        self.log(f"resumed from {checkpoint.folder(Path(root), iteration)} at step {iteration}")
        return iteration

    def save(self, step: int) -> None:
        from mlrecipe_scripts.megatron.gpt import checkpoint

        if not self.args.save:
            return
        root = Path(self.args.save)
        if self.trainer is not None:
            common = {"iteration": step, "args": dict(vars(self.args)), "impl": self.impl,
                      "shape": dict(self.shape.__dict__), "consumed_samples": step * self.gb}
            path = parallel.save_dist(self.trainer, root, step, common, self.validated.get(step))
            self.log(f"saved checkpoint {path} (megatron-core torch_dist)")
        elif self.rank == 0:
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "iteration": step,
                     "rng": self.torch.get_rng_state(), "args": vars(self.args), "impl": self.impl,
                     "shape": self.shape.__dict__, "consumed_samples": step * self.gb}
            path = checkpoint.save(root, step, state, self.validated.get(step))
            self.log(f"saved checkpoint {path}")
        if self.rank == 0:
            removed = checkpoint.prune(root, self.args.keep_last, self.args.keep_best)
            if removed:
                self.log("removed checkpoint(s) " + ", ".join(checkpoint.folder(root, i).name for i in removed))
        if self.world > 1:
            self.dist.barrier()

    def evaluate(self) -> float | None:
        if self.valid is None:
            return None
        torch = self.torch
        if self.trainer is not None:
            iters = max(self.args.eval_iters, 1)
            batches = [self.batch(self.valid, (i * self.dp + self.dp_rank) * self.mb) for i in range(iters)]
            value = self.trainer.evaluate(batches, iters)
            total = torch.tensor([value, iters if self.trainer.last_stage else 0], dtype=torch.float64,
                                 device=self.device)
            if self.world > 1:
                self.dist.all_reduce(total)
            return float(total[0] / total[1])
        self.ddp.eval()
        total = torch.zeros(2, dtype=torch.float64, device=self.device)
        with torch.no_grad():
            for i in range(max(self.args.eval_iters, 1)):
                start = (i * self.world + self.rank) * self.mb
                total += torch.stack([self.loss(self.batch(self.valid, start)).double(),
                                      torch.ones((), dtype=torch.float64, device=self.device)])
        if self.world > 1:
            self.dist.all_reduce(total)
        self.ddp.train()
        return float(total[0] / total[1])

    def plain_step(self, step: int, lr: float) -> Any:
        """One optimizer step of the plain-torch path (torch DDP over every rank); this rank's mean loss."""
        torch = self.torch
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.device)
        for micro in range(self.accum):
            start = step * self.gb + (micro * self.world + self.rank) * self.mb
            tokens = self.batch(self.train, start)
            sync = self.world == 1 or micro == self.accum - 1
            context = self.ddp.no_sync() if not sync else _null()
            with context:
                loss = self.loss(tokens) / self.accum if self.accum > 1 else self.loss(tokens)
                loss.backward()
            total += loss.detach()
        if self.args.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip_grad)
        self.optimizer.step()
        return total

    def megatron_step(self, step: int, lr: float) -> Any:
        """One optimizer step through megatron-core's schedule; this rank's mean loss (0 off the last stage)."""
        assert self.trainer is not None
        self.trainer.set_lr(lr)
        batches = [self.batch(self.train, step * self.gb + (micro * self.dp + self.dp_rank) * self.mb)
                   for micro in range(self.accum)]
        return self.torch.tensor(self.trainer.step(batches, self.accum) / self.accum, device=self.device)

    def train_loop(self, writer: Any) -> float:
        args = self.args
        step = self.resume()
        if step >= args.train_iters:
            self.log(f"nothing to do: the checkpoint is at step {step} of {args.train_iters}")
            return 0.0
        self.ddp.train()
        started, window_start, window_samples, loss_value = time.perf_counter(), time.perf_counter(), 0, float("nan")
        trained_samples = 0
        while step < args.train_iters:
            lr = learning_rate(args, step)
            total = self.plain_step(step, lr) if self.trainer is None else self.megatron_step(step, lr)
            step += 1
            window_samples += self.gb
            trained_samples += self.gb
            if step % args.log_interval == 0 or step == args.train_iters:
                if self.world > 1:
                    self.dist.all_reduce(total)
                    total /= self.world if self.trainer is None else self.layout.data * self.layout.tensor
                loss_value = float(total)
                elapsed = time.perf_counter() - window_start
                rate = window_samples / elapsed if elapsed > 0 else 0.0
                if self.rank == 0:
                    print(f"step {step}/{args.train_iters} loss {loss_value:.4f} lr {lr:.3g} "
                          f"samples/s {rate:.1f}", flush=True)
                    report_progress(step, args.train_iters, loss=loss_value, lr=lr, samples_per_second=rate,
                           cpu_seconds=time.process_time())
                    if writer:
                        writer.add_scalar("lm loss", loss_value, step)
                        writer.add_scalar("learning-rate", lr, step)
                        writer.add_scalar("samples per second", rate, step)
                window_start, window_samples = time.perf_counter(), 0
            if args.eval_interval and step % args.eval_interval == 0 and step < args.train_iters:
                self.validation(step, writer)
            if args.save_interval and step % args.save_interval == 0 and step < args.train_iters:
                self.save(step)
        self.validation(step, writer)
        self.save(step)
        seconds = time.perf_counter() - started
        rate = trained_samples / seconds if seconds > 0 else 0.0
        self.log(f"done: {trained_samples} samples in {seconds:.1f} s ({rate:.1f} samples/s), final loss "
                 f"{loss_value:.4f}")
        return rate

    def validation(self, step: int, writer: Any) -> None:
        value = self.evaluate()
        if value is not None:
            self.validated[step] = value
        if value is None or self.rank != 0:
            return
        ppl = math.exp(min(value, 50.0))
        print(f"validation at step {step}: loss {value:.4f} perplexity {ppl:.2f}", flush=True)
        report_progress(step, self.args.train_iters, val_loss=value, val_ppl=ppl)
        if writer:
            writer.add_scalar("lm loss validation", value, step)
            writer.add_scalar("lm loss validation ppl", ppl, step)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _has_megatron() -> bool:
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        return False
    return True


def tensorboard(path: str | None, rank: int) -> Any:
    if not path or rank != 0:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("warning: tensorboard is not installed: no events written", file=sys.stderr)
        return None
    return SummaryWriter(log_dir=path)


def main(argv: list[str] | None = None) -> int:
    offline_defaults()
    args = build_parser().parse_args(argv)
    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "micro_batch_size", "train_iters",
                 "log_interval"):
        if getattr(args, name) <= 0:
            raise ScriptError(f"--{name.replace('_', '-')} must be positive")
    if args.hidden_size % args.num_attention_heads:
        raise ScriptError(f"--hidden-size {args.hidden_size} is not a multiple of --num-attention-heads "
                          f"{args.num_attention_heads}")
    try:
        run = Run(args)
    except parallel.FlagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run.setup()
    writer = tensorboard(args.tensorboard_dir, run.rank)
    try:
        run.train_loop(writer)
    finally:
        if writer:
            writer.close()
    return 0


if __name__ == "__main__":
    run_main(main)
