"""LeaderWorkerSet through the harness as lws v0.8.0 runs it: the triton-inference-server-lws chart's two ci
scenarios with a CPU stand-in server on the ``pv-fsx`` claim (the leader answers the chart's readiness probe once
every worker of its group has registered with it at ``$PET_MASTER_ADDR``, which the step runtime maps from
``LWS_LEADER_ADDRESS``), and the planted defects: a worker given a wrong leader address, a leader whose readiness
probe never succeeds. LeaderReady and group recreation run in ``lws_scenarios.py`` (``make kubelet-scenarios``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.kubelet.controllers.lws import lws_env
from tests.kubelet_runs.lws_cases import IDLE_WORKERS, RUNTIME_WORKERS, lws_object, render_lws
from tests.kubelet_runs.ray_cases import logs
from tests.kubelet_runs.scenarios import run_harness


def test_lws_env_comes_first_and_wins_over_the_containers_own() -> None:
    """AddLWSVariables (pkg/utils/pod/pod_utils.go, v0.8.0): the three variables first, a same-named entry of the
    container dropped, the others kept in order."""
    container = {"env": [{"name": "A", "value": "1"}, {"name": "LWS_GROUP_SIZE", "value": "9"},
                         {"name": "B", "value": "2"}]}
    assert lws_env(container, "x-0.x.ns", 3, 2) == [
        {"name": "LWS_LEADER_ADDRESS", "value": "x-0.x.ns"}, {"name": "LWS_GROUP_SIZE", "value": "3"},
        {"name": "LWS_WORKER_INDEX", "value": "2"}, {"name": "A", "value": "1"}, {"name": "B", "value": "2"}]


@pytest.mark.integration
@pytest.mark.slow
def test_runtime_workers_scenario_becomes_available(tmp_path: Path) -> None:
    done = run_harness(tmp_path, render_lws(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: LeaderWorkerSet/ci: Available (1/1 groups ready, 4 pods each)" in done.stdout
    leader = logs(tmp_path, "ci-0/triton-inference-server.log")
    assert "'LWS_LEADER_ADDRESS': 'ci-0.ci.default', 'LWS_GROUP_SIZE': '4', 'LWS_WORKER_INDEX': '0'" in leader
    assert "'PET_NODE_RANK': '0', 'PET_NNODES': '4'" in leader and "host ci-0" in leader
    key = leader.split("'GROUP_KEY': '")[1].split("'")[0]
    assert len(key) == 40
    assert sorted(line for line in leader.splitlines() if line.startswith("registered")) == [
        "registered worker 1", "registered worker 2", "registered worker 3"]
    for index in (1, 2, 3):
        worker = logs(tmp_path, f"ci-0-{index}/triton-inference-server.log")
        assert f"'LWS_WORKER_INDEX': '{index}', 'GROUP_KEY': '{key}'" in worker
        assert f"'PET_MASTER_ADDR': 'ci-0.ci.default', 'PET_NODE_RANK': '{index}'" in worker
        assert "leader ci-0.ci.default resolves to 127.0.0.2" in worker and f"host ci-0-{index}" in worker


@pytest.mark.integration
@pytest.mark.slow
def test_default_scenario_with_idle_workers_becomes_available(tmp_path: Path) -> None:
    done = run_harness(tmp_path, render_lws(tmp_path, "default-values.yaml", IDLE_WORKERS), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: LeaderWorkerSet/ci: Available (1/1 groups ready, 2 pods each)" in done.stdout
    assert "leader serving on 127.0.0.2" in logs(tmp_path, "ci-0/triton-inference-server.log")
    assert (tmp_path / "logs" / "ci-0-1" / "triton-inference-server.log").exists()


@pytest.mark.integration
@pytest.mark.slow
def test_worker_given_a_wrong_leader_address_fails_naming_it(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        worker = lws_object(objects)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        worker["env"].append({"name": "PET_MASTER_ADDR", "value": "ci-7.ci.default"})

    objects = render_lws(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    done = run_harness(tmp_path, objects, timeout=120, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: LeaderWorkerSet/ci: group 0: a container exited before the set was Available" in done.stdout
    assert "  pod ci-0-" in done.stdout and ", container triton-inference-server" in done.stdout
    assert "cannot reach the leader ci-7.ci.default:8000" in done.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_leader_failing_its_readiness_probe_fails_naming_it(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        leader = lws_object(objects)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        leader["readinessProbe"]["httpGet"]["path"] = "/v2/health/planted"

    objects = render_lws(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    done = run_harness(tmp_path, objects, timeout=20, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: LeaderWorkerSet/ci: group 0: leader not Ready within --timeout 20 s" in done.stdout
    assert "  pod ci-0, container triton-inference-server" in done.stdout
