"""GPT training samples from Megatron indexed datasets, without megatron-core (the CPU path's data).

Each dataset's documents are split by ``--split`` into train / valid / test ranges as Megatron splits them (by
document, in order). Preparation writes a document's sequences back to back, so a split is one contiguous token range
of the ``.bin`` (memory-mapped). A split holds ``(tokens - 1) // seq_length`` samples of ``seq_length + 1`` tokens
(inputs and shifted labels), visited in a seeded random order per epoch. A blend interleaves its datasets so that
after every sample each dataset's share is as close to its weight as possible (Megatron's blending rule).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlrecipe_scripts.core.script_core import ScriptError
from mlrecipe_scripts.megatron.data.indexed import read_index

SPLITS = ("train", "valid", "test")


def parse_split(text: str) -> tuple[float, float, float]:
    """``"98,1,1"`` (or ``"98/1/1"``; missing parts are 0) -> normalized fractions."""
    try:
        parts = [float(p) for p in text.replace("/", ",").split(",") if p.strip()]
    except ValueError:
        raise ScriptError(f"--split: expected 'train,valid,test' numbers, got '{text}'") from None
    parts = [*parts, 0.0, 0.0, 0.0][:3]
    if any(p < 0 for p in parts) or sum(parts) <= 0:
        raise ScriptError(f"--split: expected non-negative numbers with a positive sum, got '{text}'")
    total = sum(parts)
    return parts[0] / total, parts[1] / total, parts[2] / total


def split_tokens(prefix: str, split: tuple[float, float, float], which: str) -> np.ndarray:
    """The token range of split ``which`` of the dataset at ``prefix`` (a memory map; empty when it has no
    documents)."""
    index = read_index(Path(prefix + ".idx"))
    docs = len(index.document_indices) - 1
    bounds: list[float] = [0]
    for fraction in split:
        bounds.append(bounds[-1] + fraction)
    cuts = [round(b * docs) for b in bounds]
    cuts[-1] = docs
    first_doc, end_doc = cuts[SPLITS.index(which)], cuts[SPLITS.index(which) + 1]
    if end_doc <= first_doc:
        return np.zeros(0, dtype=index.dtype)
    first_seq = int(index.document_indices[first_doc])
    end_seq = int(index.document_indices[end_doc])
    if end_seq <= first_seq:  # documents without tokens only (upstream writes them without a sequence)
        return np.zeros(0, dtype=index.dtype)
    size = index.dtype.itemsize
    start = int(index.pointers[first_seq]) // size
    stop = int(index.pointers[end_seq - 1]) // size + int(index.lengths[end_seq - 1])
    if stop <= start:
        return np.zeros(0, dtype=index.dtype)
    data = np.memmap(prefix + ".bin", dtype=index.dtype, mode="r")
    return data[start:stop]


class SplitSamples:
    """Samples of one split of one dataset: ``sample(k)`` for any k (epochs repeat in a new seeded order)."""

    def __init__(self, tokens: np.ndarray, seq_length: int, seed: int) -> None:
        self.tokens = tokens
        self.seq_length = seq_length
        self.count = max((len(tokens) - 1) // seq_length, 0)
        self.seed = seed
        self._orders: dict[int, np.ndarray] = {}

    def sample(self, k: int) -> np.ndarray:
        epoch, pos = divmod(k, self.count)
        order = self._orders.get(epoch)
        if order is None:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.count)
            self._orders = {epoch: order}
        start = int(order[pos]) * self.seq_length
        return np.asarray(self.tokens[start:start + self.seq_length + 1], dtype=np.int64)


def blend_order(weights: tuple[float, ...], count: int) -> tuple[np.ndarray, np.ndarray]:
    """For ``count`` blended samples: (dataset of each, its sample number within that dataset)."""
    chosen = np.zeros(count, dtype=np.int64)
    within = np.zeros(count, dtype=np.int64)
    taken = np.zeros(len(weights), dtype=np.int64)
    target = np.asarray(weights, dtype=np.float64)
    for i in range(count):
        best = int(np.argmax(target * (i + 1) - taken))
        chosen[i], within[i] = best, taken[best]
        taken[best] += 1
    return chosen, within


class BlendedSamples:
    """Samples of one split of a blend, in the blend's order; ``batch(start, n)`` -> int64 [n, seq_length + 1]."""

    def __init__(self, prefixes: tuple[str, ...], weights: tuple[float, ...], split: tuple[float, float, float],
                 which: str, seq_length: int, seed: int, count: int) -> None:
        parts = [SplitSamples(split_tokens(p, split, which), seq_length, seed + i) for i, p in enumerate(prefixes)]
        kept = [(w, s) for w, s in zip(weights, parts, strict=True) if s.count > 0]
        if not kept:
            raise ScriptError(f"the {which} split has no sample of {seq_length + 1} tokens in {', '.join(prefixes)} "
                              "(more data, a shorter --seq-length, or a larger share in --split)")
        total = sum(w for w, _ in kept)
        self.parts = [s for _, s in kept]
        self.dataset, self.within = blend_order(tuple(w / total for w, _ in kept), count)
        self.count = count
        self.seq_length = seq_length

    @property
    def distinct(self) -> int:
        """Distinct samples in the split (one epoch of every dataset)."""
        return sum(p.count for p in self.parts)

    def batch(self, start: int, n: int) -> np.ndarray:
        if start + n > self.count:
            raise IndexError(f"samples {start}..{start + n} of {self.count}")
        return np.stack([self.parts[self.dataset[k]].sample(int(self.within[k])) for k in range(start, start + n)])
