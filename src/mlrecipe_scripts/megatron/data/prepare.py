"""``data/prepare.py``: Pile-shaped shards -> Megatron ``.bin/.idx`` files, across MPI ranks, resumable, honest.

Stages (``--stages``, default all three, each shard in turn):

- ``download``: ``<source-url>/NN<suffix>`` -> ``<data-dir>/NN<suffix>`` through ``NN<suffix>.part``; HTTP status,
  Content-Length and (with ``--checksum-file``, ``sha256sum`` format) sha256 checked before the rename.
- ``extract``: ``NN.jsonl.zst`` / ``NN.jsonl.gz`` -> ``NN.jsonl`` (a truncated stream is an error).
- ``preprocess``: the documents' ``--json-key`` field, tokenized (``--workers`` processes per rank), plus the
  end-of-document token with ``--append-eod``, into ``<data-dir>/<output-prefix>_NN_text_document.bin/.idx``
  (megatron-core's builder when it imports, else the same format written here). Without the extract stage the
  compressed shard is read as a stream.

Ranks: rank and size come from ``OMPI_COMM_WORLD_RANK``/``SIZE`` (then ``PMI_RANK``/``PMI_SIZE``, ``RANK``/
``WORLD_SIZE``; else 0 of 1). The sorted file numbers are split contiguously, as NeMo-Framework-Launcher
does: rank ``k`` of ``size`` takes positions ``k*n // size`` up to ``(k+1)*n // size`` of the ``n`` numbers
(0-5 on 4 ranks: 0, 1-2, 3, 4-5; with more ranks than files the files are spread over the ranks).
Each rank's tokenizer threads are its share of the node's CPUs (``ranks.tokenizer_threads``) unless
``TOKENIZERS_PARALLELISM`` or ``RAYON_NUM_THREADS`` is set.

Large files are cut (:mod:`~mlrecipe_scripts.megatron.data.ranges`): after a rank's own files are downloaded and
extracted, every ``.jsonl`` above ``--split-size`` bytes (default 256 MiB; every one with ``--split-within-files``)
is cut into byte ranges at line boundaries, dealt over all ranks of all nodes; the ranks exchange which files are
cut (``staged-R.json``), tokenize their ranges into parts, exchange the parts' sizes (their range markers, then
``tokenized-R.json``), and each writes its parts at their offsets of the file's one ``.bin/.idx``
(:mod:`~mlrecipe_scripts.megatron.data.merge`); rank 0 renames the pair into place once every rank reported.
The result is byte for byte a single-process run's: one ``<prefix>_NN_text_document.bin/.idx`` per input file,
documents in the file's order. Cut files are always written by the built-in writer (megatron-core's builder
cannot write at an offset; its format is the same). A compressed shard read as a stream (no extract stage) is
never cut.

Done means proven: every file gets a ``<file>.done`` marker (sizes, sha256, settings) written after it is in place;
a re-run redoes only files without a valid marker, and of a cut file only the ranges without a valid range marker
(the merge, which only places bytes, is redone). Rank 0 copies the tokenizer files into ``<data-dir>/tokenizer/``,
waits for every rank's report in ``<data-dir>/.prepare-status/`` (ranks of one launch share the launcher's job id,
or ``--run-id``) and writes ``<data-dir>/manifest.json`` last, only when every rank succeeded and every range of
every cut file is in place (it removes a previous manifest first). Any failure: one ``error: rank R: <file>: ...``
line and exit status 1; bad flags exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlrecipe_scripts.core.script_core import ScriptError, offline_defaults, run_main
from mlrecipe_scripts.megatron.data import fetch, markers, merge, ranges, ranks
from mlrecipe_scripts.megatron.data.documents import SUFFIXES, ShardFormatError, extract
from mlrecipe_scripts.megatron.data.indexed import megatron_version, optimal_dtype
from mlrecipe_scripts.megatron.data.preprocess import Encoding, preprocess, preprocess_range
from mlrecipe_scripts.megatron.data.tokenizer import (
    Tokenizer,
    TokenizerError,
    TokenizerSource,
    check_tokenizer,
    load,
)

STAGES = ("download", "extract", "preprocess")
DEFAULT_SPLIT_SIZE = 256 << 20
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str) -> int:
    """``"256M"``, ``"1G"``, ``"4096"`` -> bytes (binary units); argparse's type for ``--split-size``."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in UNITS and value[-1:] else ""
    try:
        number = int(value[:-1] if unit else value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or a number with K, M, G, T)") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be at least 1 byte")
    return number * UNITS[unit]
MANIFEST_VERSION = 1
#: Changes when the same input and settings give other bytes (2: a document without tokens is written as an empty
#: document, as upstream's preprocess_data.py writes it), so outputs and range markers of before are redone.
OUTPUT_RULES = 2


def build_parser() -> argparse.ArgumentParser:
    """The script's flags."""
    parser = argparse.ArgumentParser(
        prog="data/prepare.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Download, extract and tokenize Pile-shaped shards into Megatron .bin/.idx files on MPI ranks.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    parser.add_argument("--source-url", help="base URL; the shard's file name NN<suffix> is appended")
    parser.add_argument("--file-numbers", required=True, help="shards to prepare: '0-5', '0,3,7-9'")
    parser.add_argument("--data-dir", required=True, help="shared folder for downloads, outputs and manifest.json")
    parser.add_argument("--output-prefix", default="pile", help="outputs <data-dir>/<prefix>_NN_text_document.*")
    parser.add_argument("--shard-suffix", default=".jsonl.zst", choices=SUFFIXES, help="the shards' file type")
    tok = parser.add_argument_group("tokenizer (a folder, or GPT-2 BPE files)")
    tok.add_argument("--tokenizer-dir", help="a Hugging Face tokenizer folder (read offline)")
    tok.add_argument("--vocab-file", help="GPT-2 BPE vocab.json")
    tok.add_argument("--merge-file", help="GPT-2 BPE merges.txt")
    tok.add_argument("--eod-token", help="end-of-document token (default: the tokenizer's eos, or <|endoftext|>)")
    parser.add_argument("--append-eod", action="store_true", help="append the end-of-document token to each document")
    parser.add_argument("--json-key", default="text", help="the JSON field holding a document's text")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma list of download, extract, preprocess")
    parser.add_argument("--rm-downloaded", action="store_true", help="remove a shard's download once it is used")
    parser.add_argument("--rm-extracted", action="store_true", help="remove a shard's .jsonl once it is tokenized")
    parser.add_argument("--checksum-file", help="sha256sum-style list '<sha256>  NN<suffix>' checked per download")
    parser.add_argument("--workers", type=int, default=1, help="tokenizer processes per rank")
    parser.add_argument("--writer", default="builtin", choices=("builtin", "megatron", "auto"),
                        help="builtin: this project's writer, byte for byte megatron-core's format, without loading "
                        "torch; megatron: megatron-core's IndexedDatasetBuilder (imports torch in every rank); auto: "
                        "megatron when it imports, else builtin, decided at the first file written whole (a run whose "
                        "files are all cut never imports torch)")
    parser.add_argument("--split-size", type=byte_size, default=DEFAULT_SPLIT_SIZE,
                        help="cut every .jsonl larger than this into byte ranges spread over all ranks "
                        "(bytes, or with K/M/G; default 256M)")
    parser.add_argument("--split-within-files", action="store_true",
                        help="cut every .jsonl into byte ranges, however small")
    parser.add_argument("--retries", type=int, default=2, help="retries of a download after a transient error")
    parser.add_argument("--run-id", help="id shared by the ranks of one run (default: the MPI launcher's job id)")
    parser.add_argument("--wait-timeout", type=float, default=7 * 86400.0,
                        help="seconds rank 0 waits for the other ranks' reports")
    return parser


class ShardFailure(Exception):
    """A failure while working on one file (reported with the rank and that file)."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(f"{file}: {message}")


class PeerStopped(Exception):
    """Another rank failed while this one waited for it."""


@dataclass(frozen=True)
class CutFile:
    """An input file that is cut into byte ranges (its number, its ``.jsonl``, its size)."""

    number: int
    source: Path
    size: int


class Preparation:
    """One rank's work: its shards through the requested stages, then its report (and rank 0's manifest)."""

    def __init__(self, args: argparse.Namespace, stages: list[str], numbers: list[int], world: ranks.World) -> None:
        self.args = args
        self.stages = stages
        self.numbers = numbers
        self.world = world
        self.data_dir = Path(args.data_dir)
        self.mine = ranks.split_contiguous(numbers, world.rank, world.size)
        self.run_id = args.run_id or world.run_id
        self.source: TokenizerSource | None = None
        self.tok: Tokenizer | None = None
        self.encoding: Encoding | None = None
        self.run_key = hashlib.sha256(json.dumps(vars(args), sort_keys=True).encode()).hexdigest()
        self.fingerprint = self.run_key
        self.checksums: dict[str, str] | None = None
        self.writer = "builtin"
        self.current = ""  #: the shard being worked on, for errors that name no file (a full disk)
        self.plan: dict[int, list[ranges.ByteRange]] = {}  #: cut files' ranges, the same on every rank

    def log(self, message: str) -> None:
        print(f"[rank {self.world.rank}/{self.world.size}] {message}", flush=True)

    def setup(self) -> None:
        """Tokenizer (loaded and checked on every rank), checksums; rank 0 clears the old manifest."""
        args = self.args
        if "preprocess" in self.stages:
            try:
                self.source = TokenizerSource.from_args(args.tokenizer_dir, args.vocab_file, args.merge_file,
                                                        args.eod_token)
                self.tok = load(self.source)
                check_tokenizer(self.tok)
                if args.append_eod and self.tok.eod_id is None:
                    raise TokenizerError("no end-of-document token found for --append-eod (set --eod-token)")
                fingerprint = self.source.fingerprint()
            except (TokenizerError, OSError) as exc:
                where = args.tokenizer_dir or args.vocab_file or "tokenizer"
                raise ShardFailure(f"tokenizer {where}", str(exc)) from None
            self.writer = self.resolve_writer() if args.writer == "megatron" else args.writer
            dtype = optimal_dtype(self.tok.vocab_size).name
            self.encoding = Encoding(self.source, args.json_key, args.append_eod, dtype)
            self.fingerprint = hashlib.sha256(json.dumps(
                [fingerprint, args.json_key, args.append_eod, dtype, OUTPUT_RULES]).encode()).hexdigest()
        if args.checksum_file:
            try:
                self.checksums = fetch.read_checksums(Path(args.checksum_file))
            except (OSError, ValueError) as exc:
                raise ShardFailure(args.checksum_file, str(exc)) from None

    def resolve_writer(self) -> str:
        """``auto`` -> ``megatron`` when megatron-core's indexed-dataset module imports (imported here, once).
        ``--writer megatron`` is checked at setup; ``auto`` only when a whole file is written (:meth:`tokenize`),
        so a run whose files are all cut (always the built-in writer) never imports megatron-core or torch."""
        if self.args.writer == "builtin":
            return "builtin"
        version = megatron_version()
        if version is None and self.args.writer == "megatron":
            raise ShardFailure("megatron-core", "--writer megatron: megatron.core.datasets does not import")
        return "megatron" if version else "builtin"

    def paths(self, number: int) -> tuple[Path, Path, Path]:
        """(download, extracted .jsonl, output prefix) of shard ``number``."""
        name = ranks.shard_name(number)
        compressed = self.data_dir / f"{name}{self.args.shard_suffix}"
        prefix = self.data_dir / f"{self.args.output_prefix}_{name}_text_document"
        return compressed, self.data_dir / f"{name}.jsonl", prefix

    def shard(self, number: int) -> CutFile | None:
        compressed, extracted, prefix = self.paths(number)
        bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
        out_marker = prefix.with_name(prefix.name + ".done")
        if "preprocess" in self.stages and markers.done(out_marker, self.fingerprint):
            self.log(f"{prefix.name}: complete, skipped")
            self.cleanup(compressed, extracted, tokenized=True)
            return None
        if "download" in self.stages:
            self.download(compressed)
        if "extract" in self.stages and extracted != compressed:
            self.extract(compressed, extracted)
        if "preprocess" in self.stages:
            source = extracted if self.usable(extracted) else compressed
            if not source.is_file():
                raise ShardFailure(compressed.name, "no input: the shard was neither downloaded nor extracted")
            size = source.stat().st_size
            if ranges.is_cut(source, size, self.args.split_size, self.args.split_within_files):
                markers.forget(bin_path, idx_path)
                out_marker.unlink(missing_ok=True)
                return CutFile(number, source, size)
            self.tokenize(source, bin_path, idx_path, out_marker)
        self.cleanup(compressed, extracted, tokenized="preprocess" in self.stages)
        return None

    def usable(self, extracted: Path) -> bool:
        if markers.done(markers.marker_path(extracted), None):
            return True
        return "extract" not in self.stages and extracted.is_file()

    def download(self, target: Path) -> None:
        if not self.args.source_url:
            raise ShardFailure(target.name, "the download stage needs --source-url")
        url = f"{self.args.source_url.rstrip('/')}/{target.name}"
        expected = None
        if self.checksums is not None:
            expected = self.checksums.get(target.name)
            if expected is None:
                raise ShardFailure(target.name, f"not listed in the checksum file {self.args.checksum_file}")
        marker = markers.marker_path(target)
        fingerprint = f"{url} {expected or ''}"
        if markers.done(marker, fingerprint):
            self.log(f"{target.name}: downloaded before, skipped")
            return
        markers.forget(target)
        started = time.monotonic()
        try:
            fetch.download(url, target, expected, retries=self.args.retries)
        except fetch.FetchError as exc:
            raise ShardFailure(target.name, str(exc)) from None
        markers.mark_done(marker, {"download": target}, fingerprint, url=url)
        self.log(f"{target.name}: downloaded {target.stat().st_size} bytes in {time.monotonic() - started:.1f} s")

    def extract(self, compressed: Path, extracted: Path) -> None:
        marker = markers.marker_path(extracted)
        if markers.done(marker, compressed.name):
            self.log(f"{extracted.name}: extracted before, skipped")
            return
        if not compressed.is_file():
            raise ShardFailure(compressed.name, "no such file to extract (run the download stage)")
        if compressed.stat().st_size == 0 and compressed.suffix in (".zst", ".gz"):
            raise ShardFailure(compressed.name, "empty file (0 bytes): not a compressed shard")
        markers.forget(extracted)
        try:
            size = extract(compressed, extracted)
        except ShardFormatError as exc:
            raise ShardFailure(compressed.name, str(exc)) from None
        markers.mark_done(marker, {"jsonl": extracted}, compressed.name)
        self.log(f"{compressed.name}: extracted {size} bytes")

    def tokenize(self, source: Path, bin_path: Path, idx_path: Path, marker: Path) -> None:
        assert self.encoding is not None and self.tok is not None
        if self.writer == "auto":
            self.writer = self.resolve_writer()
        markers.forget(bin_path, idx_path)
        marker.unlink(missing_ok=True)
        bin_part = bin_path.with_name(bin_path.name + ".part")
        idx_part = idx_path.with_name(idx_path.name + ".part")
        started, cpu_started = time.monotonic(), time.process_time()
        try:
            counts = preprocess(source, bin_part, idx_part, self.encoding, self.tok, self.args.workers,
                                self.writer)
        except ShardFormatError as exc:
            bin_part.unlink(missing_ok=True)
            idx_part.unlink(missing_ok=True)
            raise ShardFailure(source.name, str(exc)) from None
        except BaseException:
            bin_part.unlink(missing_ok=True)
            idx_part.unlink(missing_ok=True)
            raise
        if counts.sequences == 0:
            bin_part.unlink(missing_ok=True)
            idx_part.unlink(missing_ok=True)
            what = "it is empty (0 bytes)" if source.stat().st_size == 0 else "no line holds a document with text"
            raise ShardFailure(source.name, f"no documents: {what}")
        os.replace(bin_part, bin_path)
        os.replace(idx_part, idx_path)
        seconds, cpu_seconds = time.monotonic() - started, time.process_time() - cpu_started
        markers.mark_done(marker, {"bin": bin_path, "idx": idx_path}, self.fingerprint, source=source.name,
                          documents=counts.documents, tokens=counts.tokens, empty_documents=counts.empty_documents,
                          dtype=self.encoding.dtype, writer=counts.writer, seconds=round(seconds, 3),
                          cpu_seconds=round(cpu_seconds, 3))
        self.log(f"{source.name}: {counts.documents} documents, {counts.tokens} tokens in {seconds:.1f} s "
                 f"({counts.writer} writer) -> {bin_path.name}")

    def exchange(self, stage: str, data: dict[str, Any]) -> dict[int, dict[str, Any]]:
        try:
            return markers.exchange(self.data_dir, self.world.rank, self.world.size, stage, self.run_id,
                                    self.run_key, data, self.args.wait_timeout)
        except markers.PeerFailed as exc:
            raise PeerStopped(str(exc)) from None
        except TimeoutError as exc:
            raise ShardFailure(str(self.data_dir / markers.STATUS_DIR), str(exc)) from None

    def cut_files(self, mine: list[CutFile]) -> None:
        """Every rank: agree on the cut files, tokenize this rank's ranges, exchange sizes, write this rank's parts."""
        files = {cut.number: cut.size for cut in mine}
        found = self.exchange("staged", {"cut": [[cut.number, cut.size] for cut in mine]})
        for data in found.values():
            files.update({int(number): int(size) for number, size in data["cut"]})
        self.plan = {number: ranges.cut(size, self.args.split_size, self.world.size)
                     for number, size in sorted(files.items())}
        if not self.plan:
            return
        for number, pieces in self.plan.items():
            self.current = self.paths(number)[1].name
            for piece in ranges.assigned(pieces, self.world.rank, self.world.size):
                self.tokenize_range(number, files[number], piece)
        self.current = ""
        self.exchange("tokenized", {})
        for number, pieces in self.plan.items():
            self.current = self.paths(number)[1].name
            self.merge(number, pieces)
        self.current = ""

    def range_fingerprint(self, number: int, size: int, piece: ranges.ByteRange) -> str:
        return f"{self.fingerprint} {self.paths(number)[1].name} {size} {piece.start} {piece.end}"

    def tokenize_range(self, number: int, size: int, piece: ranges.ByteRange) -> None:
        assert self.encoding is not None and self.tok is not None
        source, prefix = self.paths(number)[1], self.paths(number)[2]
        part_bin, part_len, marker = ranges.part_paths(self.data_dir, prefix.name, piece)
        fingerprint = self.range_fingerprint(number, size, piece)
        if markers.done(marker, fingerprint):
            self.log(f"{source.name} range {piece.index + 1}/{piece.count}: complete, skipped")
            return
        if not source.is_file() or source.stat().st_size != size:
            raise ShardFailure(source.name, f"not the {size}-byte file the owning rank extracted (shared --data-dir?)")
        marker.unlink(missing_ok=True)
        marker.parent.mkdir(parents=True, exist_ok=True)
        started, cpu_started = time.monotonic(), time.process_time()
        try:
            counts = preprocess_range(source, piece.start, piece.end, part_bin, part_len, self.encoding, self.tok,
                                      self.args.workers)
        except ShardFormatError as exc:
            raise ShardFailure(source.name, str(exc)) from None
        seconds, cpu_seconds = time.monotonic() - started, time.process_time() - cpu_started
        markers.write_json(marker, {
            "fingerprint": fingerprint, "start": piece.start, "end": piece.end, "documents": counts.documents,
            "tokens": counts.tokens, "empty_documents": counts.empty_documents, "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "files": {role: {"name": path.name, "bytes": path.stat().st_size}
                      for role, path in (("bin", part_bin), ("len", part_len))}})
        self.log(f"{source.name} range {piece.index + 1}/{piece.count} (bytes {piece.start}-{piece.end}): "
                 f"{counts.documents} documents, {counts.tokens} tokens in {seconds:.1f} s")

    def range_markers(self, number: int, pieces: list[ranges.ByteRange]) -> list[dict[str, Any]]:
        """Every range's marker of a cut file (the exchanged sizes); ShardFailure when one is missing."""
        size = pieces[-1].end
        prefix = self.paths(number)[2]
        found = []
        for piece in pieces:
            data = markers.done(ranges.part_paths(self.data_dir, prefix.name, piece)[2],
                                self.range_fingerprint(number, size, piece))
            if data is None:
                raise ShardFailure(self.paths(number)[1].name,
                                   f"range {piece.index + 1}/{piece.count} is not done although its rank said so")
            found.append(data)
        return found

    def merge(self, number: int, pieces: list[ranges.ByteRange]) -> None:
        assert self.encoding is not None
        prefix = self.paths(number)[2]
        found = self.range_markers(number, pieces)
        where = merge.layout([merge.PartSize(int(d["documents"]), int(d["files"]["bin"]["bytes"]),
                                             int(d["empty_documents"])) for d in found])
        if where.sequences == 0:
            raise ShardFailure(self.paths(number)[1].name, "no documents: no line holds a document with text")
        mine = [(piece.index, *ranges.part_paths(self.data_dir, prefix.name, piece)[:2])
                for piece in ranges.assigned(pieces, self.world.rank, self.world.size)]
        merge.write_parts(prefix.with_name(prefix.name + ".bin.part"), prefix.with_name(prefix.name + ".idx.part"),
                          np.dtype(self.encoding.dtype), where, len(pieces), mine)

    def complete_cut_files(self) -> None:
        """Rank 0, after every rank reported: each cut file's pair renamed into place, its marker, parts removed."""
        assert self.encoding is not None
        for number, pieces in self.plan.items():
            compressed, extracted, prefix = self.paths(number)
            self.current = extracted.name
            found = self.range_markers(number, pieces)
            bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
            os.replace(prefix.with_name(prefix.name + ".bin.part"), bin_path)
            os.replace(prefix.with_name(prefix.name + ".idx.part"), idx_path)
            total = {key: sum(int(d[key]) for d in found) for key in ("documents", "tokens", "empty_documents")}
            markers.mark_done(prefix.with_name(prefix.name + ".done"), {"bin": bin_path, "idx": idx_path},
                              self.fingerprint, source=extracted.name, **total, dtype=self.encoding.dtype,
                              writer="mlrecipe", ranges=len(pieces),
                              seconds=round(max(float(d["seconds"]) for d in found), 3),
                              cpu_seconds=round(sum(float(d["cpu_seconds"]) for d in found), 3))
            shutil.rmtree(ranges.folder(self.data_dir, prefix.name), ignore_errors=True)
            self.cleanup(compressed, extracted, tokenized=True)
            self.log(f"{extracted.name}: {total['documents']} documents, {total['tokens']} tokens from "
                     f"{len(pieces)} ranges -> {bin_path.name}")
        self.current = ""

    def cleanup(self, compressed: Path, extracted: Path, tokenized: bool) -> None:
        if self.args.rm_extracted and tokenized and extracted != compressed:
            markers.forget(extracted)
        extracted_done = markers.done(markers.marker_path(extracted), None) is not None
        if self.args.rm_downloaded and (tokenized or extracted_done):
            markers.forget(compressed)

    def manifest(self) -> dict[str, Any]:
        """The manifest of every shard's outputs (rank 0, after every rank reported success)."""
        assert self.source is not None and self.tok is not None and self.encoding is not None
        prefixes = []
        for number in self.numbers:
            prefix = self.paths(number)[2]
            data = markers.done(prefix.with_name(prefix.name + ".done"), self.fingerprint)
            if data is None:
                raise ShardFailure(prefix.name, "not complete although every rank reported success")
            prefixes.append({"prefix": prefix.name, "file_number": number, "documents": data["documents"],
                             "tokens": data["tokens"], "bin": data["files"]["bin"], "idx": data["files"]["idx"],
                             "writer": data["writer"]})
        return {
            "format": "megatron-indexed-dataset", "version": MANIFEST_VERSION, "dtype": self.encoding.dtype,
            "source_url": self.args.source_url, "file_numbers": self.numbers, "json_key": self.args.json_key,
            "append_eod": self.args.append_eod, "ranks": self.world.size,
            "documents": sum(p["documents"] for p in prefixes), "tokens": sum(p["tokens"] for p in prefixes),
            "prefixes": prefixes,
            "tokenizer": {"kind": self.source.kind, "dir": "tokenizer", "vocab_size": self.tok.vocab_size,
                          "eod_id": self.tok.eod_id,
                          "files": self.source.copy_to(self.data_dir / "tokenizer")},
        }

    def run(self) -> int:
        self.log(f"file numbers {self.mine or 'none'} of {len(self.numbers)}; stages {','.join(self.stages)}")
        markers.status_path(self.data_dir, self.world.rank).unlink(missing_ok=True)
        for stage in ("staged", "tokenized"):
            markers.stage_path(self.data_dir, self.world.rank, stage).unlink(missing_ok=True)
        if self.world.rank == 0 and "preprocess" in self.stages:
            (self.data_dir / markers.MANIFEST).unlink(missing_ok=True)  # a failed run leaves none behind
        try:
            self.setup()
            cut = []
            for number in self.mine:
                self.current = f"{ranks.shard_name(number)}{self.args.shard_suffix}"
                if (found := self.shard(number)) is not None:
                    cut.append(found)
            self.current = ""
            if "preprocess" in self.stages:
                self.cut_files(cut)
            markers.report(self.data_dir, self.world.rank, self.run_id, self.run_key, None, self.mine)
        except ShardFailure as exc:
            return self.fail(str(exc))
        except PeerStopped as exc:
            if self.world.rank == 0:
                return self.fail(f"{exc}; no manifest written", report=False, prefix=False)
            return self.fail(f"stopped: {exc}")
        except OSError as exc:
            return self.fail(f"{self.current or self.data_dir}: {os_error(exc)}")
        if self.world.rank != 0:
            return 0
        return self.finish()

    def finish(self) -> int:
        """Rank 0: wait for the others, then write the manifest (preprocess stage only)."""
        try:
            found = markers.wait_for_ranks(self.data_dir, self.world.size, self.run_id, self.run_key,
                                           self.args.wait_timeout)
        except TimeoutError as exc:
            return self.fail(f"{self.data_dir / markers.STATUS_DIR}: {exc}; no manifest written", report=False)
        failed = [data for data in found.values() if not data.get("ok")]
        if failed:
            return self.fail(f"{failed[0]['error']}; no manifest written", report=False, prefix=False)
        if "preprocess" not in self.stages:
            self.log("every rank succeeded (no preprocess stage: no manifest)")
            return 0
        try:
            self.complete_cut_files()
            manifest = self.manifest()
        except ShardFailure as exc:
            return self.fail(str(exc), report=False)
        except OSError as exc:
            return self.fail(f"{self.current or self.data_dir}: {os_error(exc)}; no manifest written", report=False)
        try:
            markers.write_json(self.data_dir / markers.MANIFEST, manifest)
        except OSError as exc:
            return self.fail(f"{markers.MANIFEST}: {os_error(exc)}; no manifest written", report=False)
        self.log(f"every rank succeeded: {manifest['documents']} documents, {manifest['tokens']} tokens in "
                 f"{len(manifest['prefixes'])} files; wrote {self.data_dir / markers.MANIFEST}")
        return 0

    def fail(self, message: str, report: bool = True, prefix: bool = True) -> int:
        text = f"rank {self.world.rank}: {message}" if prefix else message
        if report:
            try:
                markers.status_path(self.data_dir, self.world.rank).parent.mkdir(parents=True, exist_ok=True)
                markers.report(self.data_dir, self.world.rank, self.run_id, self.run_key, text, self.mine)
            except OSError as exc:  # a full disk: the other ranks learn of it from the launcher
                text += f" (this rank's report was not written either: {os_error(exc)})"
        raise ScriptError(text)


def os_error(exc: OSError) -> str:
    """One line for a failed file operation: the system's words, and the file when the error names one."""
    words = (exc.strerror or str(exc)).lower() if exc.strerror else str(exc)
    return f"{words} ({exc.filename})" if exc.filename else words


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, then run this rank's share (see the module docstring)."""
    offline_defaults()
    parser = build_parser()
    args = parser.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        parser.error(f"--stages: {', '.join(unknown) or 'empty'} not among {', '.join(STAGES)}")
    try:
        numbers = ranks.parse_file_numbers(args.file_numbers)
        world = ranks.world()
    except ValueError as exc:
        parser.error(f"--file-numbers: {exc}" if "file numbers" in str(exc) else str(exc))
    if "download" in stages and not args.source_url:
        parser.error("--source-url is required by the download stage")
    if "preprocess" in stages and not (args.tokenizer_dir or (args.vocab_file and args.merge_file)):
        parser.error("the preprocess stage needs --tokenizer-dir, or --vocab-file with --merge-file")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    Path(args.data_dir).mkdir(parents=True, exist_ok=True)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.update(ranks.tokenizer_threads(dict(os.environ), args.workers, cpus))
    return Preparation(args, stages, numbers, world).run()


if __name__ == "__main__":
    run_main(main)
