"""Byte-range sharding of large files in ``data/prepare.py`` (issue 39, point 1), run for real: the chart tree's entry
file as 2 rank processes given Open MPI's variables by hand, a tiny ``--split-size`` so every file is cut into many
ranges dealt over both ranks, one ``.bin/.idx`` per file byte-identical to megatron-core's ``IndexedDatasetBuilder``
fed single-process by the same tokenizer (what ``tools/preprocess_data.py`` does; the megatron-core wheel does not
ship that script), and a ``kill -9`` mid-range after which a re-run redoes only the ranges without a marker.
The first tests are pure (no process): every line lands in exactly one range whatever the cut points."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlrecipe_scripts.megatron.data import merge
from mlrecipe_scripts.megatron.data.documents import lines, range_lines
from mlrecipe_scripts.megatron.data.indexed import IndexedWriter, PartWriter
from mlrecipe_scripts.megatron.data.ranges import assigned, cut
from tests.frameworks.megatron_data import Corpus, clean_env, make_corpus, prepare_command, stage_shards

pytest.importorskip("zstandard")
pytest.importorskip("tokenizers")
SPLIT = "8K"


def test_consecutive_ranges_give_every_line_once_in_order_whatever_the_cut_points(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    rows = [b"", b"a", b"  ", b"bb" * 50, b"c", b"", b"d" * 7, b"eeeee"]
    path.write_bytes(b"\n".join(rows))  # no newline at the end, blank lines, one long line
    expected = [line for _, line in lines(path)]
    size = path.stat().st_size
    for count in (1, 2, 3, 7, size):
        pieces = cut(size, max(size // count, 1), count)
        got = [line for piece in pieces for _, line in range_lines(path, piece.start, piece.end)]
        assert got == expected, count
    assert [piece.end - piece.start for piece in cut(100, 30, 1)] == [25, 25, 25, 25]
    assert len(cut(100, 1000, 3)) == 3 and len(cut(2, 1, 8)) == 2  # at least one range per rank, at most one per byte
    # as many ranges for every rank (9 ranges of <= 4 MB on 2 ranks would leave one rank 5/9 of the work)
    for size, split, ranks in ((32_000_094, 4_000_000, 2), (100, 30, 3), (10_000, 7, 4)):
        pieces = cut(size, split, ranks)
        assert max(p.end - p.start for p in pieces) <= split
        assert len({len(assigned(pieces, rank, ranks)) for rank in range(ranks)}) == 1, (size, split, ranks)
    pieces = cut(1000, 10, 1)
    assert [p.index for r in range(3) for p in assigned(pieces, r, 3)] == list(range(100))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_parts_written_at_their_offsets_by_any_rank_in_any_order_equal_one_writer(tmp_path: Path, dtype: type) -> None:
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 60000, size=int(n)) for n in rng.integers(1, 400, size=90)]
    whole = IndexedWriter(tmp_path / "whole.bin", np.dtype(dtype))
    for doc in docs:
        whole.add_document(doc)
    whole.finalize(tmp_path / "whole.idx")
    bounds = [0, 0, 17, 17, 60, 90]  # 5 ranges, two of them without documents
    sizes, parts = [], []
    for i in range(5):
        part = PartWriter(tmp_path / f"r{i}.bin", tmp_path / f"r{i}.len", np.dtype(dtype))
        for doc in docs[bounds[i]:bounds[i + 1]]:
            part.add_document(doc)
        part.finalize()
        sizes.append(merge.PartSize(bounds[i + 1] - bounds[i], (tmp_path / f"r{i}.bin").stat().st_size))
        parts.append((i, tmp_path / f"r{i}.bin", tmp_path / f"r{i}.len"))
    where = merge.layout(sizes)
    for mine in ([parts[4], parts[3]], [parts[0]], [parts[2], parts[1]]):  # 3 ranks, the last range's first
        merge.write_parts(tmp_path / "merged.bin", tmp_path / "merged.idx", np.dtype(dtype), where, 5, mine)
    assert (tmp_path / "merged.bin").read_bytes() == (tmp_path / "whole.bin").read_bytes()
    assert (tmp_path / "merged.idx").read_bytes() == (tmp_path / "whole.idx").read_bytes()


def _reference(corpus: Corpus, number: int, folder: Path) -> tuple[bytes, bytes]:
    """megatron-core's builder fed single-process: every line's text tokenized, the EOD appended (--append-eod)."""
    indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(corpus.tokenizer / "tokenizer.json"))
    eod = tok.token_to_id("<|endoftext|>")
    prefix = folder / f"ref_{number:02d}"
    builder = indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    for text in corpus.texts(number):
        ids = np.array([*tok.encode(text, add_special_tokens=False).ids, eod], dtype=np.uint16)
        builder.add_document(ids, [len(ids)])
    builder.finalize(f"{prefix}.idx")
    return Path(f"{prefix}.bin").read_bytes(), Path(f"{prefix}.idx").read_bytes()


def _args(corpus: Corpus, data: Path, *more: str) -> list[str]:
    return ["--file-numbers", "0-1", "--data-dir", str(data), "--tokenizer-dir", str(corpus.tokenizer),
            "--append-eod", "--stages", "extract,preprocess", "--split-size", SPLIT, *more]


def _start(args: list[str], run_id: str, size: int = 2) -> list[subprocess.Popen[str]]:
    return [subprocess.Popen(prepare_command(*args), env=clean_env(
        OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(size), OMPI_MCA_ess_base_jobid=run_id),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(size)]


def _finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=90)
        out.append((proc.returncode, stdout, stderr))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return make_corpus(tmp_path_factory.mktemp("megatron-ranges"), shards=2)


@pytest.fixture(scope="module")
def reference(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[bytes, bytes]]:
    folder = tmp_path_factory.mktemp("reference")
    return {number: _reference(corpus, number, folder) for number in (0, 1)}


def _assert_outputs(data: Path, reference: dict[int, tuple[bytes, bytes]]) -> dict[str, Any]:
    manifest = json.loads((data / "manifest.json").read_text())
    for number, (bin_bytes, idx_bytes) in reference.items():
        prefix = data / f"pile_{number:02d}_text_document"
        assert Path(f"{prefix}.bin").read_bytes() == bin_bytes, number
        assert Path(f"{prefix}.idx").read_bytes() == idx_bytes, number
    assert [p["file_number"] for p in manifest["prefixes"]] == [0, 1]
    assert not (data / ".prepare-ranges").exists() or not any((data / ".prepare-ranges").iterdir())
    return manifest


@pytest.mark.integration
def test_two_ranks_cut_each_file_into_ranges_and_write_one_pair_per_file_identical_to_megatron_core(
        corpus: Corpus, reference: dict[int, tuple[bytes, bytes]], tmp_path: Path) -> None:
    data = tmp_path / "data"
    stage_shards(corpus, data, (0, 1))
    runs = _finish(_start(_args(corpus, data, "--workers", "2"), "ranges-a"))
    assert [code for code, _, _ in runs] == [0, 0], [err for _, _, err in runs]
    manifest = _assert_outputs(data, reference)
    assert manifest["documents"] == len(corpus.texts(0)) + len(corpus.texts(1))
    for rank, (_, stdout, _) in enumerate(runs):  # both ranks tokenized ranges of both files
        for name in ("00.jsonl", "01.jsonl"):
            assert re.search(rf"\[rank {rank}/2\] {name} range \d+/\d+ \(bytes", stdout), stdout
    done = json.loads((data / "pile_00_text_document.done").read_text())
    needed = -(-(data / "00.jsonl").stat().st_size // 8192)
    assert done["ranges"] == needed + needed % 2 > 2  # rounded up to a multiple of the 2 ranks
    assert done["documents"] == len(corpus.texts(0))


@pytest.mark.integration
def test_kill_9_mid_range_then_a_rerun_redoes_only_the_unfinished_ranges(
        corpus: Corpus, reference: dict[int, tuple[bytes, bytes]], tmp_path: Path) -> None:
    data = tmp_path / "data"
    stage_shards(corpus, data, (0, 1))
    args = _args(corpus, data)
    procs = _start(args, "ranges-killed")
    parts = data / ".prepare-ranges"
    deadline = time.monotonic() + 60
    while not list(parts.glob("*/r*.done")) and time.monotonic() < deadline and procs[1].poll() is None:
        time.sleep(0.002)
    for proc in procs:  # the node goes down: every rank is killed, one of them mid-range
        proc.send_signal(signal.SIGKILL)
    _finish(procs)
    finished = {f"{p.parent.name}/{p.stem}" for p in parts.glob("*/r*.done")}
    assert finished, "no range was finished before the kill"
    assert not (data / "manifest.json").exists() and not (data / "pile_00_text_document.bin").exists()

    runs = _finish(_start(args, "ranges-rerun"))
    assert [code for code, _, _ in runs] == [0, 0], [err for _, _, err in runs]
    out = "".join(stdout for _, stdout, _ in runs)
    skipped = re.findall(r"(\d\d)\.jsonl range (\d+)/(\d+): complete, skipped", out)
    redone = re.findall(r"(\d\d)\.jsonl range (\d+)/(\d+) \(bytes", out)
    assert {f"pile_{n}_text_document/r{int(i) - 1:05d}" for n, i, _ in skipped} == finished
    ranges_of = {n: int(k) for n, _, k in skipped + redone}
    assert len(skipped) + len(redone) == sum(ranges_of.values()) and redone  # each range exactly once
    _assert_outputs(data, reference)


@pytest.mark.integration
def test_a_bad_line_in_another_ranks_range_fails_both_ranks_naming_its_byte_offset(corpus: Corpus,
                                                                                   tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rows = [json.dumps({"text": f"document {i}"}) for i in range(200)]
    rows[150] = "{not json"
    (data / "00.jsonl").write_text("\n".join(rows) + "\n")
    offset = sum(len(row) + 1 for row in rows[:150])
    args = ["--file-numbers", "0", "--data-dir", str(data), "--tokenizer-dir", str(corpus.tokenizer), "--append-eod",
            "--stages", "preprocess", "--shard-suffix", ".jsonl", "--split-within-files"]
    runs = _finish(_start(args, "ranges-bad"))
    assert [code for code, _, _ in runs] == [1, 1]
    line = f"error: rank 1: 00.jsonl: 00.jsonl byte {offset}: not JSON"  # rank 0 owns no file: rank 1 owns the range
    assert [err.splitlines()[-1].startswith(line) for _, _, err in runs] == [True, True], [e for _, _, e in runs]
    assert runs[0][2].rstrip().endswith("; no manifest written")
    assert not (data / "manifest.json").exists() and not (data / "pile_00_text_document.bin").exists()


#: Runs a script as ``python SCRIPT ARGS`` does, then says on stderr whether torch was imported by then.
TORCH_PROBE = ("import runpy, sys\nsys.argv = sys.argv[1:]\n"
               "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
               "finally:\n    sys.stderr.write(f'TORCH_IMPORTED={\"torch\" in sys.modules}\\n')\n")


@pytest.mark.integration
def test_writer_auto_imports_torch_only_for_a_file_written_whole(corpus: Corpus, tmp_path: Path) -> None:
    pytest.importorskip("megatron.core.datasets.indexed_dataset", reason="auto picks megatron-core only when present")
    for flags, torch_imported, writer in ((["--split-within-files"], False, "mlrecipe"), ([], True, "megatron-core")):
        data = tmp_path / ("cut" if flags else "whole")
        stage_shards(corpus, data, (0, 1))
        _, script, *rest = prepare_command("--file-numbers", "0-1", "--data-dir", str(data), "--tokenizer-dir",
                                           str(corpus.tokenizer), "--append-eod", "--stages", "extract,preprocess",
                                           "--writer", "auto", *flags)
        done = subprocess.run([sys.executable, "-c", TORCH_PROBE, script, *rest], env=clean_env(),
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"TORCH_IMPORTED={torch_imported}" in done.stderr, (flags, done.stderr[-2000:])
        manifest = json.loads((data / "manifest.json").read_text())
        assert {p["writer"] for p in manifest["prefixes"]} == {writer}, manifest["prefixes"]
