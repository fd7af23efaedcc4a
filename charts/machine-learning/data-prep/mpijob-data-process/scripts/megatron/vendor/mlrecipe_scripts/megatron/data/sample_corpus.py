"""Pile-shaped shards and a byte-level BPE tokenizer made offline from text that ships with Python.

``python -m mlrecipe_scripts.megatron.data.sample_corpus --out DIR --shards 4`` writes ``DIR/NN.jsonl.zst`` (one
``{"text": ..., "meta": {"pile_set_name": ...}}`` per line, like the Pile), ``DIR/sha256sums.txt`` and, with
``--tokenizer-dir``, a ``tokenizer.json`` (plus GPT-2 style ``vocab.json`` / ``merges.txt``) trained on the same text.
The documents are pydoc's help topics and the docstrings of standard-library modules, classes and functions.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import warnings
from collections.abc import Sequence
from pathlib import Path

from mlrecipe_scripts.megatron.data.fetch import sha256_file

MODULES = ("argparse", "asyncio", "base64", "bisect", "calendar", "collections", "contextlib", "csv", "dataclasses",
           "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "gzip", "hashlib", "heapq",
           "html", "http.client", "inspect", "io", "ipaddress", "itertools", "json", "logging", "math", "os",
           "pathlib", "pickle", "queue", "random", "re", "shutil", "socket", "sqlite3", "statistics", "string",
           "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "typing", "unittest",
           "urllib.parse", "uuid", "zipfile")
EOD = "<|endoftext|>"


def documents() -> list[tuple[str, str]]:
    """(set name, text) pairs in a fixed order: pydoc topics, then module, class and function docstrings."""
    from pydoc_data.topics import topics

    docs = [("pydoc_topics", topics[name].strip()) for name in sorted(topics) if topics[name].strip()]
    with warnings.catch_warnings():  # typing.io and the like warn when their docstrings are read
        warnings.simplefilter("ignore", DeprecationWarning)
        docs += _docstrings()
    return docs


def _docstrings() -> list[tuple[str, str]]:
    docs = []
    for name in MODULES:
        module = importlib.import_module(name)
        seen: set[str] = set()
        for obj in (module, *(getattr(module, attr) for attr in sorted(vars(module)) if not attr.startswith("_"))):
            doc = inspect.getdoc(obj) if (inspect.ismodule(obj) and obj is module) or inspect.isclass(obj) \
                or inspect.isfunction(obj) else None
            if doc and len(doc) > 40 and doc not in seen:
                seen.add(doc)
                docs.append(("stdlib_docstrings", doc))
    return docs


def write_shards(out: Path, shards: int, repeat: int = 1, limit: int | None = None) -> list[Path]:
    """Deal the documents (``repeat`` times over, at most ``limit``) into ``shards`` files ``out/NN.jsonl.zst`` of
    about equal size; writes ``out/sha256sums.txt``."""
    import zstandard

    docs = documents() * repeat
    docs = docs[:limit] if limit else docs
    out.mkdir(parents=True, exist_ok=True)
    dealt: list[list[str]] = [[] for _ in range(shards)]
    sizes = [0] * shards
    for name, text in docs:  # each document to the smallest shard so far: shards of about one size, as the Pile's
        smallest = sizes.index(min(sizes))
        dealt[smallest].append(json.dumps({"text": text, "meta": {"pile_set_name": name}}, ensure_ascii=False))
        sizes[smallest] += len(text)
    paths = []
    for shard, rows in enumerate(dealt):
        body = "".join(row + "\n" for row in rows)
        path = out / f"{shard:02d}.jsonl.zst"
        path.write_bytes(zstandard.ZstdCompressor(level=3).compress(body.encode()))
        paths.append(path)
    (out / "sha256sums.txt").write_text("".join(f"{sha256_file(p)}  {p.name}\n" for p in paths))
    return paths


def train_tokenizer(folder: Path, vocab_size: int = 2000) -> Path:
    """A byte-level BPE trained on :func:`documents` into ``folder`` (tokenizer.json, tokenizer_config.json,
    vocab.json, merges.txt); ``<|endoftext|>`` is its end-of-document token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((text for _, text in documents()), trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    tok.model.save(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOD, "bos_token": EOD}) + "\n")
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    """Write the shards (and the tokenizer) as the flags say."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", required=True, help="folder for NN.jsonl.zst and sha256sums.txt")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="deal the documents this many times over")
    parser.add_argument("--tokenizer-dir", help="also train a BPE tokenizer into this folder")
    parser.add_argument("--vocab-size", type=int, default=2000)
    args = parser.parse_args(argv)
    paths = write_shards(Path(args.out), args.shards, args.repeat)
    print(f"wrote {len(paths)} shards to {args.out}")
    if args.tokenizer_dir:
        train_tokenizer(Path(args.tokenizer_dir), args.vocab_size)
        print(f"wrote a BPE tokenizer to {args.tokenizer_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
