"""Shard contents as a stream: ``.jsonl.zst`` (zstandard), ``.jsonl.gz`` and ``.jsonl`` read line by line.

A truncated ``.zst`` or ``.gz`` is an error, never a silently shorter shard (zstandard's stream reader returns what
it decoded and stops; here each frame must reach its end).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20
SUFFIXES = (".jsonl.zst", ".jsonl.gz", ".jsonl")


class ShardFormatError(Exception):
    """A shard that is not complete, well-formed JSON lines with the wanted text field."""


def _zst_blocks(path: Path) -> Iterator[bytes]:
    import zstandard

    decompressor = zstandard.ZstdDecompressor()
    obj = decompressor.decompressobj()
    pending = False
    with path.open("rb") as stream:
        while block := stream.read(CHUNK):
            while block:
                pending = True
                try:
                    out = obj.decompress(block)
                except zstandard.ZstdError as exc:
                    raise ShardFormatError(f"corrupt zstandard data: {exc}") from None
                if out:
                    yield out
                if obj.eof:
                    pending = False
                    block = obj.unused_data
                    obj = decompressor.decompressobj()
                else:
                    block = b""
    if pending:
        raise ShardFormatError("truncated zstandard stream (the last frame does not end)")


def _plain_blocks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while block := stream.read(CHUNK):
            yield block


def _gz_blocks(path: Path) -> Iterator[bytes]:
    try:
        with gzip.open(path, "rb") as stream:
            while block := stream.read(CHUNK):
                yield block
    except (EOFError, gzip.BadGzipFile, OSError) as exc:
        raise ShardFormatError(f"corrupt or truncated gzip data: {exc}") from None


def blocks(path: Path) -> Iterator[bytes]:
    """The decompressed bytes of ``path``, in blocks, chosen by its suffix."""
    name = path.name
    if name.endswith(".zst"):
        return _zst_blocks(path)
    if name.endswith(".gz"):
        return _gz_blocks(path)
    return _plain_blocks(path)


def lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The non-empty lines of ``path`` (decompressed) with their 1-based line numbers, without the newline."""
    rest = b""
    number = 0
    for block in blocks(path):
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        for line in parts:
            number += 1
            if line.strip():
                yield number, line
    if rest.strip():
        yield number + 1, rest


def text_of(line: bytes, key: str, where: str) -> str:
    """The ``key`` field of one JSON line; ShardFormatError naming ``where`` (file and line) otherwise."""
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise ShardFormatError(f"{where}: not JSON ({exc})") from None
    value = row.get(key) if isinstance(row, dict) else None
    if not isinstance(value, str):
        raise ShardFormatError(f"{where}: no string field {key!r}")
    return value


def extract(source: Path, target: Path) -> int:
    """Decompress ``source`` into ``target`` (via ``target.part``, renamed when complete); return its size."""
    part = target.with_name(target.name + ".part")
    size = 0
    try:
        with part.open("wb") as out:
            for block in blocks(source):
                out.write(block)
                size += len(block)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, target)
    return size


def range_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """The non-empty lines of an uncompressed ``path`` that START at a byte offset in ``[start, end)``, with that
    offset, without the newline. A line that starts inside the range is read to its end even past ``end``, and one
    that starts before ``start`` belongs to the range before: consecutive ranges give every line exactly once, in
    order, whatever byte the cut points fall on."""
    with path.open("rb", buffering=CHUNK) as stream:
        position = 0
        if start > 0:
            stream.seek(start - 1)
            position = start - 1 + len(stream.readline())  # through the newline at or after start - 1
        while position < end:
            line = stream.readline()
            if not line:
                return
            offset, position = position, position + len(line)
            body = line[:-1] if line.endswith(b"\n") else line
            if body.strip():
                yield offset, body
