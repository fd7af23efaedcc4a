"""Stand-in for neuronx-distributed's ``examples/training/llama/get_dataset.py``, at that path in the repository the
``examples/eks/neuron`` test serves on 127.0.0.1 (:mod:`tests.kubelet_runs.git_stand_in`).

The real program downloads the ``wikicorpus`` (``raw_en``) dataset from the Hugging Face Hub with ``datasets``,
tokenizes it with the tokenizer in its working directory (``AutoTokenizer.from_pretrained(os.getcwd())``: the recipe
copies the Llama 2 tokenizer there), concatenates the token ids and cuts them into rows of ``block_size`` tokens
(4096 for ``--llama-version 2``, 8192 for 3, at most the tokenizer's ``model_max_length``) with ``labels`` equal to
``input_ids``, and saves the train split with ``save_to_disk`` in
``~/examples_datasets/wikicorpus_llama<version>_tokenized_<4k|8k>``.

This one does the same with the same tokenizer, the same cut and the same save, but its text is generated here
(seeded sentences, enough for :data:`ROWS` rows) instead of the wikicorpus download, which no pod here can reach.
It exits non-zero with one ``error:`` line when the working directory holds no tokenizer.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from itertools import chain

#: Rows of ``block_size`` tokens written (the real dataset has about 200,000 of 4096).
ROWS = 3
WORDS = ("the", "river", "north", "city", "was", "built", "near", "a", "bridge", "of", "stone", "in", "year",
         "people", "moved", "to", "its", "market", "and", "trade", "grew", "along", "coast", "during", "summer")


def sentences(seed: int):
    """Endless seeded sentences of :data:`WORDS`."""
    rng = random.Random(seed)
    while True:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        yield " ".join(words).capitalize() + "."


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-version", type=int, default=3)
    args = parser.parse_args()
    block_size = 4096 if args.llama_version == 2 else 8192
    size = "4k" if args.llama_version == 2 else "8k"
    save_path = os.path.expanduser(f"~/examples_datasets/wikicorpus_llama{args.llama_version}_tokenized_{size}")

    import datasets
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(os.getcwd())
    except (OSError, ValueError) as exc:
        sys.exit(f"error: no tokenizer in the working directory {os.getcwd()} (the real script loads it from there; "
                 f"the recipe copies the Llama tokenizer's files in): {exc}")
    block_size = min(block_size, tokenizer.model_max_length)

    ids: list[int] = []
    text = sentences(seed=args.llama_version)
    while len(ids) < ROWS * block_size:
        batch = tokenizer([" ".join(next(text) for _ in range(50)) for _ in range(20)])
        ids += list(chain(*batch["input_ids"]))
    rows = [ids[i * block_size:(i + 1) * block_size] for i in range(ROWS)]
    table = datasets.Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * block_size for _ in rows],
                                        "labels": [list(r) for r in rows]})
    os.makedirs(save_path, exist_ok=True)
    table.save_to_disk(save_path)
    print(f"{len(table)} rows of {block_size} tokens saved to {save_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
