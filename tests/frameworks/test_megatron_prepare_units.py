"""megatron data preparation, in process: the rank split, file numbers, ranks from the environment, checksums,
streamed shards (a truncated ``.zst`` / ``.gz`` is an error) and the built-in index writer read back."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from mlrecipe_scripts.megatron.data import documents, fetch, indexed, markers, ranks
from mlrecipe_scripts.megatron.data.tokenizer import TokenizerError, TokenizerSource, check_tokenizer, load

zstandard = pytest.importorskip("zstandard")


@pytest.mark.parametrize(("files", "size"), [(10, 1), (10, 2), (10, 4), (4, 4), (3, 7), (1, 2), (30, 4)])
def test_rank_shares_are_disjoint_contiguous_and_cover_the_file_numbers(files: int, size: int) -> None:
    numbers = list(range(100, 100 + files))
    shares = [ranks.split_contiguous(numbers, rank, size) for rank in range(size)]
    assert [n for share in shares for n in share] == numbers  # in order: disjoint, contiguous, complete
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_rank_split_is_the_launchers_rule() -> None:
    """The examples of NeMo-Framework-Launcher's ``split_list`` docstring and of the source system's 0-5 on 4."""
    assert [ranks.split_contiguous(list(range(18)), r, 5) for r in range(5)] == [
        [0, 1, 2], [3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13], [14, 15, 16, 17]]
    assert [ranks.split_contiguous(list(range(6)), r, 4) for r in range(4)] == [[0], [1, 2], [3], [4, 5]]
    assert [ranks.split_contiguous([0, 1], r, 4) for r in range(4)] == [[], [0], [], [1]]


def test_file_numbers() -> None:
    assert ranks.parse_file_numbers("0-5") == [0, 1, 2, 3, 4, 5]
    assert ranks.parse_file_numbers("0,3,7-9") == [0, 3, 7, 8, 9]
    assert ranks.parse_file_numbers("9, 3,3,1-2") == [1, 2, 3, 9]
    for bad in ("", "1,,2", "a", "5-3", "-1", "1-x"):
        with pytest.raises(ValueError, match="file numbers"):
            ranks.parse_file_numbers(bad)
    assert [ranks.shard_name(n) for n in (0, 7, 29, 123)] == ["00", "07", "29", "123"]


def test_world_from_open_mpi_then_torch_variables() -> None:
    assert ranks.world({}) == ranks.World(0, 1, "")
    assert ranks.world({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "RANK": "0", "WORLD_SIZE": "2",
                        "OMPI_MCA_ess_base_jobid": "77"}) == ranks.World(3, 4, "77")
    assert ranks.world({"RANK": "1", "WORLD_SIZE": "2", "SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0"}) == \
        ranks.World(1, 2, "5.0")
    with pytest.raises(ValueError, match="not a valid MPI rank"):
        ranks.world({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"})


def test_checksum_file(tmp_path: Path) -> None:
    good = tmp_path / "sums.txt"
    good.write_text(f"{'a' * 64}  00.jsonl.zst\n\n# comment\n{'B' * 64} *sub/01.jsonl.zst\n")
    assert fetch.read_checksums(good) == {"00.jsonl.zst": "a" * 64, "01.jsonl.zst": "b" * 64}
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{'a' * 64}  00.jsonl.zst\nxyz 01.jsonl.zst\n")
    with pytest.raises(ValueError, match=r"bad.txt:2:"):
        fetch.read_checksums(bad)


def _rows(n: int) -> bytes:
    return b"".join(json.dumps({"text": f"document {i} " + "word " * i}).encode() + b"\n" for i in range(n))


def test_streamed_shards_read_every_line_of_every_format(tmp_path: Path) -> None:
    body = _rows(3000)
    (tmp_path / "a.jsonl").write_bytes(body)
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(body))
    half = len(body) // 2
    frames = zstandard.ZstdCompressor().compress(body[:half]) + zstandard.ZstdCompressor().compress(body[half:])
    (tmp_path / "a.jsonl.zst").write_bytes(frames)  # two frames, as concatenated .zst files have
    for name in ("a.jsonl", "a.jsonl.gz", "a.jsonl.zst"):
        rows = list(documents.lines(tmp_path / name))
        assert [n for n, _ in rows] == list(range(1, 3001))
        assert documents.text_of(rows[-1][1], "text", name).startswith("document 2999 ")


@pytest.mark.parametrize("suffix", [".jsonl.zst", ".jsonl.gz"])
def test_a_truncated_shard_is_an_error_not_a_shorter_shard(tmp_path: Path, suffix: str) -> None:
    body = _rows(5000)
    data = zstandard.ZstdCompressor().compress(body) if suffix == ".jsonl.zst" else gzip.compress(body)
    path = tmp_path / f"00{suffix}"
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(documents.ShardFormatError, match="truncated"):
        list(documents.lines(path))
    with pytest.raises(documents.ShardFormatError):
        documents.extract(path, tmp_path / "00.jsonl")
    assert not (tmp_path / "00.jsonl").exists() and not (tmp_path / "00.jsonl.part").exists()


def test_a_line_without_the_text_field_names_file_and_line() -> None:
    with pytest.raises(documents.ShardFormatError, match=r"07.jsonl line 12: no string field 'text'"):
        documents.text_of(b'{"content": "x"}', "text", "07.jsonl line 12")
    with pytest.raises(documents.ShardFormatError, match=r"line 3: not JSON"):
        documents.text_of(b'{"text": ', "text", "07.jsonl line 3")


@pytest.mark.parametrize(("vocab", "dtype"), [(2000, "uint16"), (65499, "uint16"), (65500, "int32"), (128256, "int32")])
def test_builtin_writer_format_read_back(tmp_path: Path, vocab: int, dtype: str) -> None:
    assert indexed.optimal_dtype(vocab).name == dtype
    docs = [np.array([1, 2, 3]), np.array([vocab - 1]), np.arange(50) % vocab]
    writer = indexed.IndexedWriter(tmp_path / "x.bin", indexed.optimal_dtype(vocab))
    for doc in docs:
        writer.add_document(doc)
    writer.finalize(tmp_path / "x.idx")
    index = indexed.read_index(tmp_path / "x.idx")
    assert index.dtype.name == dtype
    assert index.lengths.tolist() == [3, 1, 50]
    assert index.document_indices.tolist() == [0, 1, 2, 3]
    data = np.fromfile(tmp_path / "x.bin", dtype=dtype)
    for doc, start, length in zip(docs, index.pointers // index.dtype.itemsize, index.lengths, strict=True):
        assert data[start:start + length].tolist() == doc.tolist()
    (tmp_path / "bad.idx").write_bytes(b"NOTANIDX" + bytes(40))
    with pytest.raises(ValueError, match="bad magic"):
        indexed.read_index(tmp_path / "bad.idx")


def test_tokenizer_threads_share_the_nodes_cpus_between_its_ranks_and_workers() -> None:
    assert ranks.tokenizer_threads({}, 1, 32) == {"RAYON_NUM_THREADS": "32"}
    assert ranks.tokenizer_threads({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, 1, 32) == {"RAYON_NUM_THREADS": "4"}
    assert ranks.tokenizer_threads({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, 3, 32) == {"TOKENIZERS_PARALLELISM": "false"}
    assert ranks.tokenizer_threads({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 1, 2) == {"TOKENIZERS_PARALLELISM": "false"}
    assert ranks.tokenizer_threads({"LOCAL_WORLD_SIZE": "4"}, 2, 16) == {"RAYON_NUM_THREADS": "2"}
    for mine in ({"TOKENIZERS_PARALLELISM": "true"}, {"RAYON_NUM_THREADS": "3"}):
        assert ranks.tokenizer_threads({**mine, "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, 1, 32) == {}


def test_rank_0_polls_for_reports_quickly_at_first_then_more_slowly(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        clock[0] += seconds
        if clock[0] >= 30:
            markers.report(tmp_path, 1, "run", "key", None, [1])

    monkeypatch.setattr(markers.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(markers.time, "sleep", sleep)
    found = markers.wait_for_ranks(tmp_path, 2, "run", "key", timeout=60)
    assert found[1]["ok"] and 30 <= clock[0] < 30.6
    assert naps[0] == pytest.approx(0.02) and max(naps[:20]) < 0.1
    assert max(naps) == pytest.approx(0.5) and naps == sorted(naps)


def test_a_tokenizer_that_gives_no_tokens_is_refused(tmp_path: Path) -> None:
    (tmp_path / "vocab.json").write_text(json.dumps({"<|endoftext|>": 0}))  # no byte of plain text is in it
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    tok = load(TokenizerSource.from_args(None, str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"), None))
    with pytest.raises(TokenizerError, match="no tokens at all"):
        check_tokenizer(tok)


def test_the_default_writer_loads_neither_megatron_core_nor_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrecipe_scripts.megatron.data import prepare

    def must_not_import() -> str | None:
        raise AssertionError("the default writer asked for megatron-core (which imports torch)")

    monkeypatch.setattr(prepare, "megatron_version", must_not_import)
    args = prepare.build_parser().parse_args(["--file-numbers", "0", "--data-dir", "d", "--tokenizer-dir", "t"])
    assert args.writer == "builtin"
    assert prepare.Preparation(args, ["preprocess"], [0], ranks.World(0, 1)).resolve_writer() == "builtin"
