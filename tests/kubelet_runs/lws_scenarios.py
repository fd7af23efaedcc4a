"""LeaderWorkerSet runs beyond ``test_lws.py`` (lws v0.8.0): ``startupPolicy: LeaderReady`` and a group recreated
under ``--max-restarts``. Not named ``test_*.py`` (about 2 minutes together); run by ``make kubelet-scenarios``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubelet_runs.lws_cases import IDLE_WORKERS, RUNTIME_WORKERS, lws_object, render_lws
from tests.kubelet_runs.ray_cases import logs
from tests.kubelet_runs.scenarios import fsx, run_harness
from tests.repo import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_leader_ready_startup_policy_creates_workers_only_once_the_leader_is_ready(tmp_path: Path) -> None:
    """``startupPolicy: LeaderReady``: with idle workers the set becomes Available (the worker created after the
    leader's probe succeeded); a leader that waits for its workers' registration then never becomes Ready, and no
    worker pod is started."""
    def leader_ready(objects: list[dict[str, Any]]) -> None:
        lws_object(objects)["spec"]["startupPolicy"] = "LeaderReady"

    idle = tmp_path / "idle"
    idle.mkdir()
    done = run_harness(idle, render_lws(idle, "default-values.yaml", IDLE_WORKERS), timeout=120, edit=leader_ready)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: LeaderWorkerSet/ci: Available (1/1 groups ready, 2 pods each)" in done.stdout
    assert (idle / "logs" / "ci-0-1" / "triton-inference-server.log").exists()

    waiting = tmp_path / "waiting"
    waiting.mkdir()
    objects = render_lws(waiting, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    done = run_harness(waiting, objects, timeout=15, edit=leader_ready)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: LeaderWorkerSet/ci: group 0: leader not Ready within --timeout 15 s" in done.stdout
    assert sorted(p.name for p in (waiting / "logs").iterdir()) == ["ci-0"]


def test_a_failed_worker_recreates_its_whole_group_under_max_restarts(tmp_path: Path) -> None:
    """``restartPolicy: RecreateGroupOnPodRestart`` (the chart's): with ``--max-restarts 1`` the failing worker's
    group, leader included, starts again under the same names before the run fails."""
    objects = render_lws(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    worker = lws_object(objects)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    worker["env"].append({"name": "PET_MASTER_ADDR", "value": "ci-7.ci.default"})
    stream = tmp_path / "stream.yaml"
    stream.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "tests.kubelet", str(stream), "--logs", str(tmp_path / "logs"),
                           "--timeout", "120", "--pvc", f"pv-fsx={fsx(tmp_path)}", "--max-restarts", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ended; restartPolicy RecreateGroupOnPodRestart followed up to --max-restarts 1" in done.stdout
    assert "FAILED: LeaderWorkerSet/ci: group 0: a container exited before the set was Available" in done.stdout
    assert logs(tmp_path, "ci-0/triton-inference-server.log").count("leader serving on 127.0.0.2") == 2
