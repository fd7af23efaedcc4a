"""One rendered workload of each kind the harness covers, run to success through ``python -m tests.kubelet``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kubelet_runs.scenarios import render, run_harness

pytestmark = pytest.mark.integration


def _log(tmp_path: Path, pod_prefix: str, container: str) -> str:
    found = sorted((tmp_path / "logs").glob(f"{pod_prefix}*/{container}.log"))
    assert found, f"no log of {pod_prefix}*/{container}"
    return "".join(p.read_text() for p in found)


def test_indexed_job_runs_every_index_with_its_hostname(tmp_path: Path) -> None:
    done = run_harness(tmp_path, render(tmp_path, "job"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: Job/data-process-kh: Complete (3/3 succeeded)" in done.stdout
    text = _log(tmp_path, "data-process-kh-", "data-process")
    for index in (0, 1, 2):
        assert f"node {index} of 3 on data-process-kh-{index}" in text
        assert (tmp_path / "fsx" / "kh" / "out" / f"shard-{index}").read_text().strip() == f"data-process-kh-{index}"


def test_pytorchjob_master_and_worker_meet_over_gloo(tmp_path: Path) -> None:
    done = run_harness(tmp_path, render(tmp_path, "pytorchjob"), timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: PyTorchJob/pytorchjob-kh: Succeeded" in done.stdout
    assert "note: nvidia.com/gpu requests of 1 rewritten to none" in done.stdout
    master = _log(tmp_path, "pytorchjob-kh-master-0", "pytorch")
    worker = _log(tmp_path, "pytorchjob-kh-worker-0", "pytorch")
    for rank, text in ((0, master), (1, worker)):
        assert (f"DISTRIBUTED_ARGS=--nnodes 2 --nproc_per_node 1 --node_rank {rank} --master_addr "
                "pytorchjob-kh-master-0 --master_port 23456") in text
        host = "pytorchjob-kh-master-0" if rank == 0 else "pytorchjob-kh-worker-0"
        assert f"rank {rank}/2 host {host} master pytorchjob-kh-master-0:23456 sum 3.0" in text


def test_mpijob_launcher_reaches_sshd_workers_over_ssh(tmp_path: Path) -> None:
    done = run_harness(tmp_path, render(tmp_path, "mpijob"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: MPIJob/dist-data-process-kh: Succeeded" in done.stdout
    launcher = _log(tmp_path, "dist-data-process-kh-launcher-", "launcher")
    for rank in (0, 1):
        assert (f"rank {rank} of 2 on dist-data-process-kh-worker-{rank} data-dir=/fsx/kh/data "
                f"node-rank={rank}") in launcher
        assert "Accepted publickey for root" in _log(tmp_path, f"dist-data-process-kh-worker-{rank}", "worker")


def test_generic_server_becomes_ready_by_its_probe(tmp_path: Path) -> None:
    done = run_harness(tmp_path, render(tmp_path, "server"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: Deployment/kh: ready (1/1 pods Ready)" in done.stdout
    assert '"GET / HTTP/1.1" 200' in _log(tmp_path, "kh-", "generic-server")
