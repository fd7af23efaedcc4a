"""The parallel merge of a cut file's parts into its one ``.bin/.idx`` pair: every rank writes its own parts.

After the one exchange of sizes (each range's done-marker records its documents and its part's bytes, on the
shared data dir), every rank knows every range's place: range ``r`` starts at document ``D_r`` and sequence
``S_r`` (the documents and sequences of the ranges before it: a document without tokens has no sequence) and at byte
``B_r`` of the ``.bin``. With ``N`` documents, ``S`` sequences and the header's ``H`` bytes, a rank writes, for each
of its ranges, with ``pwrite`` at fixed offsets of ``<prefix>.bin.part`` / ``.idx.part`` (each rank opens them
without truncating and sets their final size):

- the part's tokens at ``B_r`` of the ``.bin`` (copied in blocks, ``os.copy_file_range`` where the kernel has it);
- its sequences' lengths at ``H + 4*S_r``, their pointers (``B_r`` + the running sum of its own lengths) at
  ``H + 4S + 8*S_r`` and its documents' indices (each one's first sequence, from ``S_r``) at ``H + 12S + 8*D_r``
  of the ``.idx``;
- the owner of range 0 the header, the owner of the last range the final document index ``S``.

No process holds more than the ranges' counts and one block of lengths (``indexed.BLOCK``), and nothing goes
through rank 0: it only renames the two files into place once every rank reported its writes done. The bytes are
those of a single-process run: the same documents in the same order, the same format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlrecipe_scripts.megatron.data.indexed import (
    BLOCK,
    HEADER_BYTES,
    block_pointers,
    document_indices,
    index_bytes,
    index_header,
)

COPY_BLOCK = 8 << 20


@dataclass(frozen=True)
class PartSize:
    """What one range's part holds (from its done-marker): its documents, those without tokens among them."""

    documents: int
    bin_bytes: int
    empty_documents: int = 0


@dataclass(frozen=True)
class Layout:
    """Where each range goes: its first document, first sequence and first byte; the totals."""

    first_document: list[int]
    first_sequence: list[int]
    first_byte: list[int]
    documents: int
    sequences: int
    bin_bytes: int


def layout(sizes: list[PartSize]) -> Layout:
    """The offsets of every range from every range's size (the exchange's result)."""
    first_document, first_sequence, first_byte = [], [], []
    documents = sequences = bin_bytes = 0
    for size in sizes:
        first_document.append(documents)
        first_sequence.append(sequences)
        first_byte.append(bin_bytes)
        documents += size.documents
        sequences += size.documents - size.empty_documents
        bin_bytes += size.bin_bytes
    return Layout(first_document, first_sequence, first_byte, documents, sequences, bin_bytes)


def _open_sized(path: Path, size: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.ftruncate(fd, size)
    return fd


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _copy(source: Path, fd: int, offset: int) -> None:
    with source.open("rb") as stream:
        remaining = os.fstat(stream.fileno()).st_size
        position = 0
        while remaining > 0:
            if hasattr(os, "copy_file_range"):
                try:
                    done = os.copy_file_range(stream.fileno(), fd, min(remaining, COPY_BLOCK), position,
                                              offset + position)
                except OSError:
                    done = 0
                if done > 0:
                    position, remaining = position + done, remaining - done
                    continue
            block = os.pread(stream.fileno(), min(remaining, COPY_BLOCK), position)
            _pwrite_all(fd, block, offset + position)
            position, remaining = position + len(block), remaining - len(block)


def write_parts(bin_part: Path, idx_part: Path, dtype: np.dtype[Any], where: Layout, count: int,
                mine: list[tuple[int, Path, Path]]) -> None:
    """Write this rank's parts (``(range index, part .bin, part .len)``) at their places (module docstring)."""
    dtype = np.dtype(dtype)
    documents, sequences = where.documents, where.sequences
    bin_fd = _open_sized(bin_part, where.bin_bytes)
    idx_fd = _open_sized(idx_part, index_bytes(sequences, documents))
    try:
        for index, part_bin, part_len in mine:
            _copy(part_bin, bin_fd, where.first_byte[index])
            document, sequence, base = where.first_document[index], where.first_sequence[index], \
                where.first_byte[index]
            with part_len.open("rb") as lengths_file:
                while block := lengths_file.read(4 * BLOCK):
                    lengths = np.frombuffer(block, dtype=np.int32)
                    indices, after = document_indices(lengths, sequence)
                    _pwrite_all(idx_fd, indices.tobytes(), HEADER_BYTES + 12 * sequences + 8 * document)
                    lengths = lengths[lengths > 0]
                    _pwrite_all(idx_fd, lengths.tobytes(), HEADER_BYTES + 4 * sequence)
                    pointers, base = block_pointers(lengths, base, dtype.itemsize)
                    _pwrite_all(idx_fd, pointers.tobytes(), HEADER_BYTES + 4 * sequences + 8 * sequence)
                    document, sequence = document + len(indices), after
            if index == 0:
                _pwrite_all(idx_fd, index_header(dtype, sequences, documents), 0)
            if index == count - 1:
                _pwrite_all(idx_fd, np.int64(sequences).tobytes(), HEADER_BYTES + 12 * sequences + 8 * documents)
        os.fsync(bin_fd)
        os.fsync(idx_fd)
    finally:
        os.close(bin_fd)
        os.close(idx_fd)
