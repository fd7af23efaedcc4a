"""Stand-in for neuronx-distributed's ``examples/training/llama/training_utils.py``, which the recipe copies next to
the pretraining script (the script imports it from its own folder).

The real module holds the example's data loading, throughput and precision helpers; the pretraining script takes
``create_llama_pretraining_dataset`` from it: ``datasets.load_from_disk(data_dir)`` read through a
``DistributedSampler`` over the data-parallel ranks (no shuffle, last partial batch dropped) in a ``DataLoader`` of
``mini_batch_size``. This one does that with torch's collation instead of transformers' ``default_data_collator``.
"""

from __future__ import annotations

import datasets
from torch.utils.data import DataLoader, DistributedSampler


def create_llama_pretraining_dataset(data_dir, mini_batch_size, dp_size, dp_rank, seed):
    """The training rows of ``data_dir`` for data-parallel rank ``dp_rank`` of ``dp_size``, and ``None``."""
    train_data = datasets.load_from_disk(data_dir).with_format("torch")
    sampler = DistributedSampler(train_data, num_replicas=dp_size, rank=dp_rank, shuffle=False, drop_last=True,
                                 seed=seed)
    return DataLoader(train_data, sampler=sampler, batch_size=mini_batch_size, drop_last=True), None
