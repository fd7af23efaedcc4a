"""Byte-range sharding of large input files: which files are cut, where, and which rank takes which range.

A file is cut when it is an uncompressed ``.jsonl`` (extracted, or given as such) and it is larger than
``--split-size`` bytes, or always with ``--split-within-files``. Compressed shards cannot be cut by byte range
(a ``.zst`` frame is not seekable at a line): they are cut only once the extract stage wrote their ``.jsonl``;
read as a stream (no extract stage) they stay whole.

A cut file of ``B`` bytes has ``k`` ranges: ``ceil(B / split_size)`` rounded up to a multiple of the rank count
(at most one per byte), so every rank gets the same number of bytes (9 ranges on 2 ranks would give one rank 5/9
of the work and the other rank a wait: 1.8x at best); range ``i`` is ``[i*B // k, (i+1)*B // k)`` and owns the
lines that start inside it (:func:`~mlrecipe_scripts.megatron.data.documents.range_lines`), so no scan is needed
to agree on the cuts. The
``k`` ranges are dealt to the ranks with the launcher's contiguous split (rank ``r`` of ``n`` takes ranges
``r*k // n`` to ``(r+1)*k // n``), every rank of every node taking its share of every cut file.

Each range becomes a part (``<data-dir>/.prepare-ranges/<prefix>/rNNNNN.bin`` + ``.len``, the documents' lengths
as int32) with its own done-marker ``rNNNNN.done`` (documents, tokens, the part's sizes, the range's bounds): a
re-run redoes only ranges without a valid marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RANGES_DIR = ".prepare-ranges"


@dataclass(frozen=True)
class ByteRange:
    """Range ``index`` of ``count`` of one file: bytes ``[start, end)``."""

    index: int
    count: int
    start: int
    end: int

    @property
    def stem(self) -> str:
        return f"r{self.index:05d}"


def is_cut(source: Path, size: int, split_size: int, forced: bool) -> bool:
    """Whether ``source`` (``size`` bytes) is cut into byte ranges (the module docstring's rule)."""
    return source.name.endswith(".jsonl") and size > 0 and (forced or size > split_size)


def cut(size: int, split_size: int, ranks: int) -> list[ByteRange]:
    """The ranges of a file of ``size`` bytes: at most ``split_size`` bytes each, as many for every rank."""
    ranks = max(ranks, 1)
    needed = -(-size // max(split_size, 1))
    count = max(1, min(-(-needed // ranks) * ranks, size))
    return [ByteRange(i, count, i * size // count, (i + 1) * size // count) for i in range(count)]


def assigned(ranges: list[ByteRange], rank: int, size: int) -> list[ByteRange]:
    """Rank ``rank``'s contiguous share of ``ranges``."""
    n = len(ranges)
    return ranges[rank * n // size:(rank + 1) * n // size]


def folder(data_dir: Path, prefix: str) -> Path:
    """Where the parts of output ``prefix`` are kept until the file is complete."""
    return data_dir / RANGES_DIR / prefix


def part_paths(data_dir: Path, prefix: str, piece: ByteRange) -> tuple[Path, Path, Path]:
    """(tokens ``.bin``, lengths ``.len``, done-marker) of one range's part."""
    base = folder(data_dir, prefix) / piece.stem
    return base.with_suffix(".bin"), base.with_suffix(".len"), base.with_suffix(".done")
