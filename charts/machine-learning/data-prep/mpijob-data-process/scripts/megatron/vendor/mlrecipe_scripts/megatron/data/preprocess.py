"""One shard's documents -> one ``.bin/.idx`` pair: JSON text field, tokenizer, optional end-of-document token.

With ``workers > 1`` a process pool parses and tokenizes chunks of lines (each worker loads its own tokenizer);
documents keep their order. A document whose text gives no tokens (an empty text) is written as Megatron's
``preprocess_data.py`` writes it: a document without a sequence (an entry of the index's document indices only), no
end-of-document token; such documents are counted.

Memory is bounded whatever the input's size: lines are read as they are needed, at most ``IN_FLIGHT`` chunks per
worker are queued or waiting to be written (``Pool.imap`` would read the whole input ahead into its task queue),
token arrays are written as they come, and only the documents' lengths are kept (4 bytes each) for the index.
A byte range of a file (:func:`preprocess_range`) becomes a part: tokens and lengths, both streamed to disk.
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.pool
import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlrecipe_scripts.megatron.data.documents import lines, range_lines, text_of
from mlrecipe_scripts.megatron.data.indexed import DocumentWriter, PartWriter, open_writer
from mlrecipe_scripts.megatron.data.tokenizer import Tokenizer, TokenizerSource, load

CHUNK_LINES = 64
IN_FLIGHT = 4


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

    documents: int  #: every document written, those without tokens included (the index's document count)
    tokens: int
    empty_documents: int  #: documents whose text gave no tokens (no sequence, no end-of-document token)
    writer: str

    @property
    def sequences(self) -> int:
        """The documents with tokens (one sequence each)."""
        return self.documents - self.empty_documents


_worker: tuple[Tokenizer, Encoding] | None = None


def _init_worker(encoding: Encoding) -> None:
    global _worker
    _worker = (load(encoding.tokenizer), encoding)


def _encode_chunk(chunk: tuple[str, list[tuple[int, bytes]]]) -> list[np.ndarray]:
    assert _worker is not None
    tok, encoding = _worker
    return encode_lines(tok, encoding, *chunk)


def encode_lines(tok: Tokenizer, encoding: Encoding, where: str, rows: list[tuple[int, bytes]]) -> list[np.ndarray]:
    """Token arrays (in ``encoding.dtype``) of ``rows``; a text without tokens gives an empty array and no
    end-of-document token (upstream's rule). ``where`` names the file and the unit of the rows' numbers
    (``"00.jsonl line"``, ``"00.jsonl byte"``)."""
    texts = [text_of(line, encoding.json_key, f"{where} {number}") for number, line in rows]
    out = []
    for ids in tok.encode(texts):
        if not ids:
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


def encoded(rows: Iterator[tuple[int, bytes]], where: str, encoding: Encoding, tok: Tokenizer,
            workers: int) -> Iterable[list[np.ndarray]]:
    """Chunks of token arrays of ``rows``' documents, in order, at most ``IN_FLIGHT * workers`` chunks ahead."""
    chunks = _chunks(rows, where)
    if workers <= 1:
        yield from (encode_lines(tok, encoding, label, chunk) for label, chunk in chunks)
        return
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with context.Pool(workers, initializer=_init_worker, initargs=(encoding,)) as pool:
        pending: deque[multiprocessing.pool.AsyncResult[list[np.ndarray]]] = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(_encode_chunk, (chunk,)))
            if len(pending) >= IN_FLIGHT * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _write(chunks: Iterable[list[np.ndarray]], writer: DocumentWriter) -> tuple[int, int, int]:
    documents = tokens = empty = 0
    for arrays in chunks:
        for ids in arrays:
            writer.add_document(ids)
            documents += 1
            tokens += int(ids.size)
            empty += ids.size == 0
    return documents, tokens, empty


def preprocess(source: Path, bin_path: Path, idx_path: Path, encoding: Encoding, tok: Tokenizer, workers: int,
               writer_choice: str) -> ShardCounts:
    """Tokenize ``source`` into ``bin_path`` / ``idx_path`` (the caller renames them into place)."""
    writer = open_writer(writer_choice, bin_path, np.dtype(encoding.dtype))
    counts = _write(encoded(lines(source), f"{source.name} line", encoding, tok, workers), writer)
    writer.finalize(idx_path)
    return ShardCounts(*counts, writer.name)


def preprocess_range(source: Path, start: int, end: int, bin_path: Path, len_path: Path, encoding: Encoding,
                     tok: Tokenizer, workers: int) -> ShardCounts:
    """Tokenize the lines of ``source`` that start in bytes ``[start, end)`` into a part (``bin_path`` tokens,
    ``len_path`` int32 lengths); errors name the line by its byte offset."""
    writer = PartWriter(bin_path, len_path, np.dtype(encoding.dtype))
    counts = _write(encoded(range_lines(source, start, end), f"{source.name} byte", encoding, tok, workers), writer)
    writer.finalize()
    return ShardCounts(*counts, writer.name)
