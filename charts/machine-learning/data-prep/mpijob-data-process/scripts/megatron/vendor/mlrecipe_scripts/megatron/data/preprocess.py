"""One shard's documents -> one ``.bin/.idx`` pair: JSON text field, tokenizer, optional end-of-document token.

With ``workers > 1`` a process pool parses and tokenizes chunks of lines (each worker loads its own tokenizer);
documents keep their order. Empty texts are skipped and counted.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlrecipe_scripts.megatron.data.documents import lines, text_of
from mlrecipe_scripts.megatron.data.indexed import open_writer
from mlrecipe_scripts.megatron.data.tokenizer import Tokenizer, TokenizerSource, load

CHUNK_LINES = 64


@dataclass(frozen=True)
class Encoding:
    """How documents become token ids (the same in every worker)."""

    tokenizer: TokenizerSource
    json_key: str
    append_eod: bool
    dtype: str


@dataclass(frozen=True)
class ShardCounts:
    """What one shard produced."""

    documents: int
    tokens: int
    skipped_empty: int
    writer: str


_worker: tuple[Tokenizer, Encoding] | None = None


def _init_worker(encoding: Encoding) -> None:
    global _worker
    _worker = (load(encoding.tokenizer), encoding)


def _encode_chunk(chunk: tuple[str, list[tuple[int, bytes]]]) -> list[np.ndarray]:
    assert _worker is not None
    tok, encoding = _worker
    return encode_lines(tok, encoding, *chunk)


def encode_lines(tok: Tokenizer, encoding: Encoding, where: str, rows: list[tuple[int, bytes]]) -> list[np.ndarray]:
    """Token arrays (in ``encoding.dtype``) of ``rows``; an empty text gives an empty array (skipped later)."""
    texts = [text_of(line, encoding.json_key, f"{where} line {number}") for number, line in rows]
    out = []
    for text, ids in zip(texts, tok.encode(texts), strict=True):
        if not text:
            out.append(np.empty(0, encoding.dtype))
            continue
        if encoding.append_eod:
            assert tok.eod_id is not None
            ids = [*ids, tok.eod_id]
        out.append(np.asarray(ids, dtype=encoding.dtype))
    return out


def _chunks(rows: Iterator[tuple[int, bytes]], where: str) -> Iterator[tuple[str, list[tuple[int, bytes]]]]:
    while chunk := list(itertools.islice(rows, CHUNK_LINES)):
        yield where, chunk


def encoded(source: Path, encoding: Encoding, tok: Tokenizer, workers: int) -> Iterable[list[np.ndarray]]:
    """Chunks of token arrays of ``source``'s documents, in order."""
    chunks = _chunks(lines(source), source.name)
    if workers <= 1:
        yield from (encode_lines(tok, encoding, where, rows) for where, rows in chunks)
        return
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with context.Pool(workers, initializer=_init_worker, initargs=(encoding,)) as pool:
        yield from pool.imap(_encode_chunk, chunks, chunksize=4)


def preprocess(source: Path, bin_path: Path, idx_path: Path, encoding: Encoding, tok: Tokenizer, workers: int,
               writer_choice: str) -> ShardCounts:
    """Tokenize ``source`` into ``bin_path`` / ``idx_path`` (the caller renames them into place)."""
    writer = open_writer(writer_choice, bin_path, np.dtype(encoding.dtype))
    documents = tokens = skipped = 0
    for arrays in encoded(source, encoding, tok, workers):
        for ids in arrays:
            if ids.size == 0:
                skipped += 1
                continue
            writer.add_document(ids)
            documents += 1
            tokens += int(ids.size)
    writer.finalize(idx_path)
    return ShardCounts(documents, tokens, skipped, writer.name)
