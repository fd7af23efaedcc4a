"""Megatron's indexed dataset (``.bin`` + ``.idx``): megatron-core's builder when it imports, else this writer.

The format (megatron-core ``megatron/core/datasets/indexed_dataset.py``, little-endian):

- ``.bin``: every sequence's token ids back to back, in the index's dtype, no header.
- ``.idx``: magic ``b"MMIDIDX\\x00\\x00"``; version ``<Q`` = 1; dtype code ``<B`` (1 uint8, 2 int8, 3 int16,
  4 int32, 5 int64, 6 float64, 7 float32, 8 uint16); sequence count ``<Q``; document-index count ``<Q``
  (documents + 1); sequence lengths (int32 each); sequence pointers (int64 byte offsets into ``.bin``); document
  indices (int64: the first sequence of each document, then the sequence count).

Preparation writes one sequence per document (Megatron's ``preprocess_data.py`` without sentence splitting), none
for a document without tokens (upstream's empty document: a document index that repeats the previous one), and
picks the dtype as megatron-core does: uint16 when the vocabulary has fewer than 65,500 tokens, else int32.
Both writers give the same bytes for the same tokens.
"""

from __future__ import annotations

import array
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES: dict[str, int] = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6,
                               "float32": 7, "uint16": 8}


def optimal_dtype(vocab_size: int) -> np.dtype[Any]:
    """megatron-core's rule: uint16 below 65,500 tokens, else int32."""
    return np.dtype(np.uint16 if vocab_size < 65500 else np.int32)


class DocumentWriter(Protocol):
    """Writes documents into a ``.bin`` and, at the end, the ``.idx``."""

    name: str

    def add_document(self, ids: np.ndarray) -> None: ...

    def finalize(self, idx_path: Path) -> None: ...


class IndexedWriter:
    """This project's writer of the format above (no torch, no megatron-core).

    Tokens go to the ``.bin`` as they come; only the documents' lengths are kept (4 bytes per document, 0 for a
    document without tokens), and the ``.idx`` is written from them in blocks (``BLOCK`` documents at a time)."""

    name = "mlrecipe"

    def __init__(self, bin_path: Path, dtype: np.dtype[Any]) -> None:
        self.dtype = np.dtype(dtype)
        self._data: BinaryIO = bin_path.open("wb")
        self._lengths = array.array("i")

    def add_document(self, ids: np.ndarray) -> None:
        array_ = np.asarray(ids, dtype=self.dtype)
        self._data.write(array_.tobytes(order="C"))
        self._lengths.append(int(array_.size))

    def finalize(self, idx_path: Path) -> None:
        self._data.close()
        lengths = np.frombuffer(self._lengths, dtype=np.int32) if self._lengths else np.empty(0, np.int32)
        documents = len(lengths)
        sequences = int(np.count_nonzero(lengths))
        blocks = range(0, documents, BLOCK)
        with idx_path.open("wb") as out:
            out.write(index_header(self.dtype, sequences, documents))
            for start in blocks:
                block = lengths[start:start + BLOCK]
                out.write(block[block > 0].tobytes(order="C"))
            base = 0
            for start in blocks:
                block = lengths[start:start + BLOCK]
                pointers, base = block_pointers(block[block > 0], base, self.dtype.itemsize)
                out.write(pointers.tobytes(order="C"))
            before = 0
            for start in blocks:
                indices, before = document_indices(lengths[start:start + BLOCK], before)
                out.write(indices.tobytes(order="C"))
            out.write(np.int64(before).tobytes())


BLOCK = 1 << 20
HEADER_BYTES = len(MAGIC) + struct.calcsize("<QBQQ")


def index_header(dtype: np.dtype[Any], sequences: int, documents: int | None = None) -> bytes:
    """The ``.idx`` header of ``documents`` documents (default: as many as ``sequences``) holding ``sequences``."""
    documents = sequences if documents is None else documents
    return MAGIC + struct.pack("<QBQQ", VERSION, DTYPE_CODES[np.dtype(dtype).name], sequences, documents + 1)


def index_bytes(sequences: int, documents: int | None = None) -> int:
    """The size of the ``.idx`` of ``documents`` documents (default: as many as ``sequences``) holding
    ``sequences``."""
    documents = sequences if documents is None else documents
    return HEADER_BYTES + 4 * sequences + 8 * sequences + 8 * (documents + 1)


def document_indices(lengths: np.ndarray, before: int) -> tuple[np.ndarray, int]:
    """Each document's first sequence for documents of ``lengths`` (0: no sequence) after ``before`` sequences;
    and the sequence count after them."""
    has_sequence = (lengths > 0).astype(np.int64)
    counts = np.cumsum(has_sequence) + before
    return counts - has_sequence, int(counts[-1]) if len(counts) else before


def block_pointers(lengths: np.ndarray, base: int, itemsize: int) -> tuple[np.ndarray, int]:
    """Byte offsets of sequences of ``lengths`` that start at byte ``base``; and the offset after them."""
    sizes = lengths.astype(np.int64) * itemsize
    pointers = np.empty(len(sizes), dtype=np.int64)
    if len(sizes):
        pointers[0] = base
        np.cumsum(sizes[:-1], out=pointers[1:])
        pointers[1:] += base
    return pointers, base + int(sizes.sum())


class PartWriter:
    """One byte range's part: tokens into ``<part>.bin``, each document's length (int32) into ``<part>.len``;
    both streamed. The merge (:mod:`~mlrecipe_scripts.megatron.data.merge`) places them in the file's pair."""

    name = "mlrecipe"

    def __init__(self, bin_path: Path, len_path: Path, dtype: np.dtype[Any]) -> None:
        self.dtype = np.dtype(dtype)
        self._data: BinaryIO = bin_path.open("wb")
        self._lens: BinaryIO = len_path.open("wb")

    def add_document(self, ids: np.ndarray) -> None:
        array_ = np.asarray(ids, dtype=self.dtype)
        self._data.write(array_.tobytes(order="C"))
        self._lens.write(struct.pack("<i", array_.size))

    def finalize(self, idx_path: Path | None = None) -> None:
        for stream in (self._data, self._lens):
            stream.flush()
            os.fsync(stream.fileno())
            stream.close()


class MegatronWriter:
    """megatron-core's ``IndexedDatasetBuilder``, one document per call."""

    name = "megatron-core"

    def __init__(self, bin_path: Path, dtype: np.dtype[Any]) -> None:
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        self._builder = IndexedDatasetBuilder(str(bin_path), dtype=np.dtype(dtype).type)

    def add_document(self, ids: np.ndarray) -> None:
        self._builder.add_document(ids, [len(ids)] if len(ids) else [])

    def finalize(self, idx_path: Path) -> None:
        self._builder.finalize(str(idx_path))


def megatron_version() -> str | None:
    """megatron-core's version when its indexed-dataset module imports, else None."""
    try:
        from importlib.metadata import version

        import megatron.core.datasets.indexed_dataset  # noqa: F401
    except Exception:
        return None
    try:
        return version("megatron-core")
    except Exception:
        return "unknown"


def open_writer(choice: str, bin_path: Path, dtype: np.dtype[Any]) -> DocumentWriter:
    """``auto``: megatron-core's builder if it imports, else ours; ``megatron`` / ``builtin`` force one."""
    if choice == "builtin" or (choice == "auto" and megatron_version() is None):
        return IndexedWriter(bin_path, dtype)
    return MegatronWriter(bin_path, dtype)


@dataclass(frozen=True)
class Index:
    """An ``.idx`` file read back (for checks and for readers without megatron-core)."""

    dtype: np.dtype[Any]
    lengths: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray


def read_index(idx_path: Path) -> Index:
    """Parse an ``.idx``; ValueError when it is not the format above."""
    raw = idx_path.read_bytes()
    if raw[:len(MAGIC)] != MAGIC:
        raise ValueError(f"{idx_path}: not a Megatron index (bad magic)")
    offset = len(MAGIC)
    version, code, sequences, documents = struct.unpack_from("<QBQQ", raw, offset)
    if version != VERSION:
        raise ValueError(f"{idx_path}: index version {version}, expected {VERSION}")
    names = {v: k for k, v in DTYPE_CODES.items()}
    if code not in names:
        raise ValueError(f"{idx_path}: unknown dtype code {code}")
    offset += struct.calcsize("<QBQQ")
    lengths = np.frombuffer(raw, np.int32, sequences, offset)
    offset += lengths.nbytes
    pointers = np.frombuffer(raw, np.int64, sequences, offset)
    offset += pointers.nbytes
    document_indices = np.frombuffer(raw, np.int64, documents, offset)
    return Index(np.dtype(names[code]), lengths, pointers, document_indices)
