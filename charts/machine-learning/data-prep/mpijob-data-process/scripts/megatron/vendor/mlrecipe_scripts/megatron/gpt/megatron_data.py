"""megatron-core's GPT dataset for pretraining: ``BlendedMegatronDatasetBuilder`` over the blend, ``--split`` by
document, its shuffled sample indices cached under ``--data-cache-path`` (its C++ helper, ``helpers_cpp``, is built
at install or at first use)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np


class _Tokenizer:
    """What ``GPTDataset`` asks of a tokenizer: the end-of-document and padding ids."""

    def __init__(self, eod: int, vocab_size: int) -> None:
        self.eod = eod
        self.pad = eod
        self.vocab_size = vocab_size
        self.unique_identifiers = {"class": "mlrecipe-manifest", "eod": eod}


class GPTSamples:
    """A megatron-core dataset seen as ``batch(start, n)`` -> int64 [n, seq + 1] (tokens plus the last label)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def batch(self, start: int, n: int) -> np.ndarray:
        rows = []
        for k in range(start, start + n):
            item = self.dataset[k % len(self.dataset)]
            rows.append(np.concatenate([item["tokens"].numpy(), item["labels"][-1:].numpy()]))
        return np.stack(rows).astype(np.int64)


def build(args: argparse.Namespace, blend: Any, shape: Any, train: int, valid: int, cache: str) -> tuple[Any, Any]:
    """(train samples, valid samples or None) from megatron-core's GPTDataset."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    eod = blend.eod_id if blend.eod_id is not None else 0
    config = GPTDatasetConfig(
        random_seed=args.seed, sequence_length=args.seq_length, blend=(list(blend.prefixes), list(blend.weights)),
        split=args.split, path_to_cache=cache, tokenizer=_Tokenizer(eod, shape.vocab_size),
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False)

    # Every rank builds (rank 0 first, writing the index cache; the builder orders that itself).
    train_ds, valid_ds, _ = BlendedMegatronDatasetBuilder(GPTDataset, [train, valid, 0], lambda: True,
                                                          config).build()
    return GPTSamples(train_ds), (GPTSamples(valid_ds) if valid_ds is not None else None)
