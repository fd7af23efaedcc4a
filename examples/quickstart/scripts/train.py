"""Train a tiny Llama causal language model with real DDP, checkpointing and resume.

Launched by torchrun (one process per node on CPU, gloo; NCCL when GPUs are present). Every
``--ckpt-every`` steps rank 0 writes ``step-XXXXXX.pt`` (model, optimizer, step); a restarted run
continues from the newest one, so the total number of optimizer steps is exactly ``--steps``.
At the end rank 0 saves the model and tokenizer in Hugging Face format to ``--export``. Rank 0 also writes
the loss as TensorBoard events (``--tensorboard-dir``, default: ``tensorboard`` beside the checkpoint directory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def build_model(vocab_size: int, seq_len: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=344,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max(seq_len, 128),
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def init_distributed() -> tuple[int, int, torch.device]:
    """Join the process group; the store is namespaced per attempt (a restarted gloo group reuses it)."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    use_cuda = torch.cuda.is_available() and os.environ.get("MLRECIPE_DEVICE", "") != "cpu"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else torch.device("cpu")
    if world > 1:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False)
        # Agents may disagree on TORCHELASTIC_RESTART_COUNT (only the failed node's agent counts a
        # restart), so the attempt is counted in the store itself: every worker of an attempt joins once.
        joined = store.add(f"mlrecipe/{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/joined", 1)
        attempt = (joined - 1) // world
        dist.init_process_group(
            "nccl" if use_cuda else "gloo", store=dist.PrefixStore(f"attempt-{attempt}", store),
            rank=rank, world_size=world,
        )
    if use_cuda:
        torch.cuda.set_device(device)
    return rank, world, device


def newest_checkpoint(directory: Path) -> Path | None:
    found = sorted(directory.glob("step-*.pt"))
    return found[-1] if found else None


def report_progress(step: int, total: int, **metrics: float) -> None:
    """mlrecipe's progress contract: one JSON line per report in $MLRECIPE_METRICS_FILE (if the runtime set it)."""
    path = os.environ.get("MLRECIPE_METRICS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"time": time.time(), "step": step, "total": total, "metrics": metrics}) + "\n")


def save_checkpoint(directory: Path, step: int, model: torch.nn.Module, optim: torch.optim.Optimizer,
                    losses: list[float]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".step-{step:06d}.tmp"
    torch.save({"step": step, "model": model.state_dict(), "optim": optim.state_dict(), "losses": losses}, tmp)
    tmp.replace(directory / f"step-{step:06d}.pt")


def tensorboard_writer(log_dir: str | Path, start: int):
    """A TensorBoard SummaryWriter (events after ``start`` dropped on resume), or None without tensorboard."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("tensorboard is not installed: no TensorBoard events", flush=True)
        return None
    return SummaryWriter(log_dir=str(log_dir), purge_step=start or None)


def batches(tokens: np.ndarray, seq_len: int, batch: int, rank: int, world: int, step: int):
    """The batch of ``rank`` at ``step``: deterministic, so a resumed run sees the same data."""
    rng = np.random.default_rng(1000003 * step + 7)
    starts = rng.integers(0, tokens.size - seq_len - 1, size=batch * world)[rank * batch:(rank + 1) * batch]
    rows = np.stack([tokens[s:s + seq_len].astype(np.int64) for s in starts])
    return torch.from_numpy(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="directory with train.npy and tokenizer/")
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--export", required=True, help="Hugging Face export directory")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--ckpt-every", type=int, default=25)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds to pause per step (tests)")
    parser.add_argument("--tensorboard-dir", help="TensorBoard event files (default: <ckpt-dir>/../tensorboard)")
    args = parser.parse_args()

    rank, world, device = init_distributed()
    torch.manual_seed(0)
    data = Path(args.data)
    tokens = np.load(data / "train.npy")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(data / "tokenizer")
    model = build_model(len(tokenizer), args.seq_len).to(device)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    ckpt_dir = Path(args.ckpt_dir)
    start, losses = 0, []
    newest = newest_checkpoint(ckpt_dir)
    if newest is not None:
        state = torch.load(newest, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        start, losses = state["step"], state["losses"]
        print(f"[rank {rank}] resumed from {newest.name} at step {start}", flush=True)
    ddp = DistributedDataParallel(model) if world > 1 else model
    writer = tensorboard_writer(args.tensorboard_dir or Path(args.ckpt_dir).parent / "tensorboard", start) \
        if rank == 0 else None
    t0 = time.time()
    for step in range(start, args.steps):
        inputs = batches(tokens, args.seq_len, args.batch, rank, world, step).to(device)
        loss = ddp(input_ids=inputs, labels=inputs).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        optim.step()
        value = loss.detach().clone()
        if world > 1:
            dist.all_reduce(value)
            value /= world
        losses.append(float(value))
        done = step + 1
        if writer is not None:
            writer.add_scalar("train/loss", losses[-1], done)
        if rank == 0 and (done % 10 == 0 or done == args.steps):
            rate = (done - start) / max(time.time() - t0, 1e-9)
            print(f"step {done}/{args.steps} loss {losses[-1]:.4f} ({rate:.1f} steps/s)", flush=True)
            report_progress(done, args.steps, loss=losses[-1])
        if rank == 0 and (done % args.ckpt_every == 0 or done == args.steps):
            save_checkpoint(ckpt_dir, done, model, optim, losses)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    if writer is not None:
        writer.close()
    if world > 1:
        dist.barrier()
    if rank == 0:
        export = Path(args.export)
        model.save_pretrained(export)
        tokenizer.save_pretrained(export)
        first, last = float(np.mean(losses[:10])), float(np.mean(losses[-10:]))
        summary = {"steps": len(losses), "world_size": world, "first_loss": first, "last_loss": last}
        (export / "train_metrics.json").write_text(json.dumps(summary, indent=2))
        print(f"trained {len(losses)} steps on {world} rank(s): loss {first:.3f} -> {last:.3f}; "
              f"exported to {export}", flush=True)
    if world > 1:
        dist.destroy_process_group()
        # gloo's threads can abort the interpreter's C++ teardown ("terminate called without an active
        # exception", SIGABRT) after the work is done; the agent would count that as a failed worker.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
