"""Held-out perplexity of the exported model (loaded back from its Hugging Face files).

Also measures an untrained model of the same configuration, so the gain is visible, and
writes everything to ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch


@torch.no_grad()
def perplexity(model: torch.nn.Module, tokens: np.ndarray, seq_len: int) -> float:
    model.eval()
    total, count = 0.0, 0
    for start in range(0, tokens.size - seq_len, seq_len):
        ids = torch.from_numpy(tokens[start:start + seq_len].astype(np.int64))[None]
        loss = model(input_ids=ids, labels=ids).loss
        total += float(loss) * (seq_len - 1)
        count += seq_len - 1
    return math.exp(total / count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="Hugging Face model directory")
    parser.add_argument("--data", required=True, help="directory with val.npy")
    parser.add_argument("--out", required=True, help="metrics.json path")
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    tokens = np.load(Path(args.data) / "val.npy")
    trained = AutoModelForCausalLM.from_pretrained(args.model)
    untrained = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.model))
    train_metrics = json.loads((Path(args.model) / "train_metrics.json").read_text())
    metrics = {
        "heldout_tokens": int(tokens.size),
        "perplexity": perplexity(trained, tokens, args.seq_len),
        "perplexity_untrained": perplexity(untrained, tokens, args.seq_len),
        "train_first_loss": train_metrics["first_loss"],
        "train_last_loss": train_metrics["last_loss"],
        "train_steps": train_metrics["steps"],
        "world_size": train_metrics["world_size"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(metrics, indent=2))
    print(f"held-out perplexity {metrics['perplexity']:.1f} (untrained {metrics['perplexity_untrained']:.1f}); "
          f"train loss {metrics['train_first_loss']:.3f} -> {metrics['train_last_loss']:.3f}", flush=True)
    print(json.dumps(metrics), flush=True)


if __name__ == "__main__":
    main()
