"""Build a real text dataset offline and tokenize it onto the shared volume.

The text is the Python documentation that ships with every CPython (``pydoc_data.topics``):
no hub, no network. A byte-level BPE tokenizer is trained on the training split with the
``tokenizers`` library and saved in Hugging Face format next to the token arrays.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np


def documents() -> list[tuple[str, str]]:
    """Paragraphs of the documentation, keyed so that the split is stable."""
    from pydoc_data.topics import topics

    out = []
    for topic, text in sorted(topics.items()):
        for i, para in enumerate(p.strip() for p in text.split("\n\n")):
            if len(para) > 40:
                out.append((f"{topic}/{i}", para))
    return out


def split(docs: list[tuple[str, str]], val_percent: int) -> tuple[list[str], list[str]]:
    train, val = [], []
    for key, text in docs:
        bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 100
        (val if bucket < val_percent else train).append(text)
    return train, val


def train_tokenizer(texts: list[str], vocab_size: int, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(out)
    return fast


def encode(tokenizer, texts: list[str]) -> np.ndarray:
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text)["input_ids"])
        ids.append(tokenizer.eos_token_id)
    return np.asarray(ids, dtype=np.uint16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="output directory (on /fsx)")
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--val-percent", type=int, default=10)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train_texts, val_texts = split(documents(), args.val_percent)
    tokenizer = train_tokenizer(train_texts, args.vocab_size, out / "tokenizer")
    train_ids, val_ids = encode(tokenizer, train_texts), encode(tokenizer, val_texts)
    np.save(out / "train.npy", train_ids)
    np.save(out / "val.npy", val_ids)
    info = {
        "source": "pydoc_data.topics (CPython documentation)",
        "documents": {"train": len(train_texts), "val": len(val_texts)},
        "tokens": {"train": int(train_ids.size), "val": int(val_ids.size)},
        "vocab_size": len(tokenizer),
    }
    (out / "dataset.json").write_text(json.dumps(info, indent=2))
    print(json.dumps(info))


if __name__ == "__main__":
    main()
