"""``framework: megatron`` ``data/prepare.py`` run for real: the chart tree's entry file as a process, shards from a
real HTTP server on 127.0.0.1, 2 ranks under ``mpirun`` (or by hand), failures that must name rank and file and
leave no manifest, and a ``kill -9`` mid-download after which ``mlrecipe resume`` fetches only what was incomplete."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.frameworks.megatron_data import (
    Corpus,
    ShardServer,
    clean_env,
    error_lines,
    make_corpus,
    prepare_command,
    run_prepare,
)
from tests.integration.helpers import cli, finish, release_processes, start_cli, wait_for

pytest.importorskip("zstandard")
pytest.importorskip("tokenizers")
pytestmark = pytest.mark.integration
RESUME_RELEASE = "megatron-data"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return make_corpus(tmp_path_factory.mktemp("megatron-corpus"))


def _args(server: ShardServer, corpus: Corpus, data: Path, numbers: str = "0-3", *more: str) -> list[str]:
    return ["--source-url", server.url, "--file-numbers", numbers, "--data-dir", str(data),
            "--tokenizer-dir", str(corpus.tokenizer), "--append-eod", "--writer", "builtin", *more]


def _manifest(data: Path) -> dict:
    return json.loads((data / "manifest.json").read_text())


def test_one_rank_prepares_every_shard_and_a_rerun_redoes_only_the_damaged_one(corpus: Corpus, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ShardServer(corpus.shards) as server:
        args = _args(server, corpus, data, "0-3", "--checksum-file", str(corpus.shards / "sha256sums.txt"))
        first = run_prepare(*args)
        assert first.returncode == 0, first.stderr
        manifest = _manifest(data)
        assert [p["prefix"] for p in manifest["prefixes"]] == [f"pile_{n:02d}_text_document" for n in range(4)]
        assert [p["documents"] for p in manifest["prefixes"]] == [len(corpus.texts(n)) for n in range(4)]
        assert manifest["tokens"] == sum(p["tokens"] for p in manifest["prefixes"]) > manifest["documents"]
        assert manifest["dtype"] == "uint16" and manifest["ranks"] == 1 and manifest["append_eod"] is True
        copied = {f["name"]: f for f in manifest["tokenizer"]["files"]}
        assert set(copied) == {p.name for p in corpus.tokenizer.iterdir()}
        for name, entry in copied.items():
            assert (data / "tokenizer" / name).read_bytes() == (corpus.tokenizer / name).read_bytes()
            assert len(entry["sha256"]) == 64
        assert sorted(server.requests) == [f"/{n:02d}.jsonl.zst" for n in range(4)]

        damaged = data / "pile_02_text_document.bin"
        damaged.write_bytes(damaged.read_bytes()[:100])
        second = run_prepare(*args)
        assert second.returncode == 0, second.stderr
        assert len(server.requests) == 4  # nothing downloaded again
        assert second.stdout.count("complete, skipped") == 3
        assert "pile_02_text_document.bin" in second.stdout and "02.jsonl: " in second.stdout
        assert _manifest(data)["prefixes"] == manifest["prefixes"]  # the same bytes again


def test_two_ranks_under_mpirun_split_the_shards_and_rank_0_writes_the_manifest(corpus: Corpus,
                                                                                tmp_path: Path) -> None:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (make system-deps installs Open MPI)")
    data = tmp_path / "data"
    with ShardServer(corpus.shards) as server:
        command = [mpirun, "-np", "2", "--oversubscribe", "--allow-run-as-root",
                   *prepare_command(*_args(server, corpus, data, "0-2", "--rm-downloaded", "--rm-extracted"))]
        done = subprocess.run(command, env=clean_env(), capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(server.requests) == ["/00.jsonl.zst", "/01.jsonl.zst", "/02.jsonl.zst"]
    assert "[rank 0/2] file numbers [0] of 3" in done.stdout  # the launcher's split: 3 * k // 2
    assert "[rank 1/2] file numbers [1, 2] of 3" in done.stdout
    statuses = [json.loads((data / ".prepare-status" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [s["shards"] for s in statuses] == [[0], [1, 2]] and all(s["ok"] for s in statuses)
    assert statuses[0]["run_id"] == statuses[1]["run_id"] != ""
    assert _manifest(data)["ranks"] == 2 and len(_manifest(data)["prefixes"]) == 3
    assert not list(data.glob("*.jsonl*"))  # downloads and extracted files removed once used


def _ranks_by_hand(args: list[str], run_id: str, size: int = 2) -> list[subprocess.CompletedProcess[str]]:
    """``size`` ranks as processes given Open MPI's variables by hand (what mpirun sets)."""
    procs = [subprocess.Popen(prepare_command(*args), env=clean_env(
        OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(size), OMPI_MCA_ess_base_jobid=run_id),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(size)]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=90)
        out.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return out


def test_more_ranks_than_files_the_idle_rank_still_reports_and_rank_0_waits_for_it(corpus: Corpus,
                                                                                  tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ShardServer(corpus.shards) as server:
        runs = _ranks_by_hand(_args(server, corpus, data, "1,3"), "run-b", size=3)
        assert sorted(server.requests) == ["/01.jsonl.zst", "/03.jsonl.zst"]
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr for r in runs]
    assert "[rank 0/3] file numbers none of 2" in runs[0].stdout  # the launcher's split spreads 2 files over 3 ranks
    assert [p["file_number"] for p in _manifest(data)["prefixes"]] == [1, 3]
    assert json.loads((data / ".prepare-status" / "rank-0.json").read_text())["shards"] == []


def test_a_truncated_zst_on_rank_1_fails_both_ranks_naming_rank_and_file(corpus: Corpus, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    shutil.copytree(corpus.shards, mirror)
    shard = mirror / "03.jsonl.zst"
    shard.write_bytes(shard.read_bytes()[:-500])  # served whole (Content-Length matches): the stream is cut short
    data = tmp_path / "data"
    with ShardServer(mirror) as server:
        rank0, rank1 = _ranks_by_hand(_args(server, Corpus(mirror, corpus.tokenizer), data), "run-a")
    assert rank1.returncode == 1
    assert error_lines(rank1.stderr) == ["error: rank 1: 03.jsonl.zst: truncated zstandard stream "
                                         "(the last frame does not end)"]
    assert rank0.returncode == 1
    assert error_lines(rank0.stderr) == ["error: rank 1: 03.jsonl.zst: truncated zstandard stream "
                                         "(the last frame does not end); no manifest written"]
    assert not (data / "manifest.json").exists()
    assert not (data / "03.jsonl").exists() and not (data / "03.jsonl.done").exists()


def test_a_shard_answering_404_fails_naming_rank_and_file_with_no_manifest(corpus: Corpus, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ShardServer(corpus.shards) as server:
        done = run_prepare(*_args(server, corpus, data, "3-4"))
    assert done.returncode == 1
    assert error_lines(done.stderr) == [
        f"error: rank 0: 04.jsonl.zst: HTTP 404 Not Found from {server.url}/04.jsonl.zst"]
    assert not (data / "manifest.json").exists()
    assert not (data / "04.jsonl.zst").exists() and not (data / "04.jsonl.zst.part").exists()
    assert (data / "pile_03_text_document.done").exists()  # the good shard stays done for the re-run


def test_a_sha256_mismatch_fails_before_the_file_is_kept(corpus: Corpus, tmp_path: Path) -> None:
    sums = tmp_path / "sums.txt"
    sums.write_text(f"{'0' * 64}  00.jsonl.zst\n")
    with ShardServer(corpus.shards) as server:
        done = run_prepare(*_args(server, corpus, tmp_path / "data", "0", "--checksum-file", str(sums)))
    assert done.returncode == 1
    assert len(error_lines(done.stderr)) == 1 and "rank 0: 00.jsonl.zst: sha256 mismatch" in done.stderr
    assert not (tmp_path / "data" / "00.jsonl.zst").exists()


def test_a_bad_tokenizer_fails_naming_rank_and_file_before_any_download(corpus: Corpus, tmp_path: Path) -> None:
    bad = tmp_path / "bad-tokenizer"
    shutil.copytree(corpus.tokenizer, bad)
    (bad / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": ')
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text("{}")  # a previous run's: must not survive a failed one
    with ShardServer(corpus.shards) as server:
        done = run_prepare(*_args(server, Corpus(corpus.shards, bad), data))
    assert done.returncode == 1
    [line] = error_lines(done.stderr)
    assert line.startswith(f"error: rank 0: tokenizer {bad}: {bad / 'tokenizer.json'}: cannot read the tokenizer")
    assert server.requests == [] and not (data / "manifest.json").exists()


def _data_step_pipeline(folder: Path, server: ShardServer, corpus: Corpus, numbers: str) -> Path:
    """A one-step pipeline: ``data/prepare.py`` on the MPI data-prep chart, writing to /fsx/<release>/data."""
    args = _args(server, corpus, Path(f"/fsx/{RESUME_RELEASE}/data"), numbers)
    (folder / "data.yaml").write_text(json.dumps({
        "image": "nvcr.io/nvidia/pytorch:25.10-py3", "framework": "megatron",
        "resources": {"nnodes": 1, "nproc_per_node": 1},
        "launcher": {"type": "python", "script": "/etc/framework-scripts/data/prepare.py", "args": args}}))
    pipeline = folder / "pipeline.yaml"
    pipeline.write_text(json.dumps({"release": RESUME_RELEASE, "steps": [
        {"name": "data", "chart": "data-prep/mpijob-data-process", "recipe": "data.yaml"}]}))
    return pipeline


@pytest.mark.slow
def test_kill_9_during_a_download_then_mlrecipe_resume_fetches_only_what_was_incomplete(corpus: Corpus,
                                                                                       tmp_path: Path,
                                                                                       mlhome: Path) -> None:
    data = mlhome / "volumes" / "pv-fsx" / RESUME_RELEASE / "data"
    with ShardServer(corpus.shards, delay=0.02, chunk=2048) as server:  # about 0.7 s per shard
        pipeline = _data_step_pipeline(tmp_path, server, corpus, "0-2")
        run = start_cli(mlhome, "run", str(pipeline))
        wait_for(lambda: (data / "01.jsonl.zst.part").exists() or run.poll() is not None, 60,
                 "the download of shard 01")
        steps = release_processes(RESUME_RELEASE, mlhome)
        for proc in [*steps, psutil.Process(run.pid)]:  # the node crashes: the CLI goes with it
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        finish(run, 30)
        assert steps and (data / "00.jsonl.zst.done").exists() and (data / "01.jsonl.zst.part").exists()
        assert not (data / "01.jsonl.zst").exists() and not (data / "manifest.json").exists()
        assert server.count("00.jsonl.zst") == 1 and server.count("01.jsonl.zst") == 1

        resumed = cli(mlhome, "resume", RESUME_RELEASE, timeout=120)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert (server.count("00.jsonl.zst"), server.count("01.jsonl.zst"), server.count("02.jsonl.zst")) == (1, 2, 1)
        log = cli(mlhome, "logs", RESUME_RELEASE, "data").stdout
        assert "pile_00_text_document: complete, skipped" in log, log[-3000:]  # shard 00 went through every stage
    assert [p["file_number"] for p in _manifest(data)["prefixes"]] == [0, 1, 2]
    assert not list(data.glob("*.part"))


def test_an_empty_shard_fails_naming_rank_and_file_with_no_manifest(corpus: Corpus, tmp_path: Path) -> None:
    import zstandard

    mirror = tmp_path / "mirror"
    shutil.copytree(corpus.shards, mirror)
    (mirror / "00.jsonl.zst").write_bytes(b"")  # a 0-byte download
    (mirror / "01.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b""))  # a valid, empty stream
    with ShardServer(mirror) as server:
        for number, error in (("0", "00.jsonl.zst: empty file (0 bytes): not a compressed shard"),
                              ("1", "01.jsonl: no documents: it is empty (0 bytes)")):
            data = tmp_path / f"data-{number}"
            done = run_prepare(*_args(server, Corpus(mirror, corpus.tokenizer), data, number))
            assert done.returncode == 1
            assert error_lines(done.stderr) == [f"error: rank 0: {error}"]
            assert not (data / "manifest.json").exists()


@pytest.mark.parametrize("kilobytes", [48, 60, 96])
def test_a_full_disk_is_one_error_line_naming_rank_and_file(corpus: Corpus, tmp_path: Path, kilobytes: int) -> None:
    """The data directory on a small tmpfs (a private mount namespace: as root or in a user namespace); the sizes
    fill it during the download, during the tokenization and while the rank writes its report."""
    data = tmp_path / "data"
    data.mkdir()
    with ShardServer(corpus.shards) as server:
        inner = subprocess.list2cmdline(prepare_command(*_args(server, corpus, data, "0-1")))
        done = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c",
                               f"mount -t tmpfs -o size={kilobytes}k tmpfs {data} && exec {inner}"],
                              env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = error_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: rank 0: 0"), done.stderr
    assert "no space left on device" in lines[0].lower()
