"""LeaderWorkerSet through the harness as lws v0.8.0 runs it: the triton-inference-server-lws chart's two ci
scenarios with a CPU stand-in server on the ``pv-fsx`` claim (the leader answers the chart's readiness probe once
every worker of its group has registered with it at ``$PET_MASTER_ADDR``, which the step runtime maps from
``LWS_LEADER_ADDRESS``), and the planted defects: a worker given a wrong leader address, a leader whose readiness
probe never succeeds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubelet.controllers.lws import lws_env
from tests.kubelet_runs.ray_cases import logs, render
from tests.kubelet_runs.scenarios import fsx, run_harness
from tests.repo import REPO

CHART = "serving/triton-inference-server-lws"
#: the leader (LWS_WORKER_INDEX 0) serves Triton's health routes on its pod address, ready once the group's
#: workers registered (a multi-node server is ready when its workers joined); a worker resolves the leader,
#: registers and stays up
SERVER = """\
import http.server, os, socket, sys, time, urllib.request
print({k: os.environ.get(k) for k in ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "GROUP_KEY",
      "PET_MASTER_ADDR", "PET_NODE_RANK", "PET_NNODES")}, "host", socket.gethostname(), flush=True)
size, index = int(os.environ["LWS_GROUP_SIZE"]), int(os.environ["LWS_WORKER_INDEX"])
expected = set() if "--idle-workers" in sys.argv else {str(i) for i in range(1, size)}
joined = set()

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/register/"):
            joined.add(self.path.rsplit("/", 1)[1])
            print("registered worker", self.path.rsplit("/", 1)[1], flush=True)
        ok = self.path == "/v2/health/live" or self.path.startswith("/register/") or (
            self.path == "/v2/health/ready" and joined >= expected)
        self.send_response(200 if ok else 503)
        self.end_headers()

    def log_message(self, *args):
        pass

if index == 0:
    address = socket.gethostbyname(socket.gethostname())
    print("leader serving on", address, flush=True)
    http.server.HTTPServer((address, 8000), Health).serve_forever()
leader = os.environ["PET_MASTER_ADDR"]
deadline = time.monotonic() + 15
while True:
    try:
        print("leader", leader, "resolves to", socket.gethostbyname(leader), flush=True)
        urllib.request.urlopen(f"http://{leader}:8000/register/{index}", timeout=2).read()
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"worker {index}: cannot reach the leader {leader}:8000: {exc}")
        time.sleep(0.5)
print("worker", index, "joined the leader", leader, flush=True)
while True:
    time.sleep(3600)
"""
RUNTIME_WORKERS = """\
server:
  command: [python3]
  args: [/fsx/lws_server.py]
"""
IDLE_WORKERS = """\
server:
  command: [python3]
  args: [/fsx/lws_server.py, --idle-workers]
"""


def _render(tmp_path: Path, scenario: str, stand_in: str) -> list[dict[str, Any]]:
    objects = render(tmp_path, CHART, scenario, stand_in, release="ci")
    (tmp_path / "fsx" / "lws_server.py").write_text(SERVER)
    return objects


def _lws(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "LeaderWorkerSet")


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
    done = run_harness(tmp_path, _render(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS), timeout=120)
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
    done = run_harness(tmp_path, _render(tmp_path, "default-values.yaml", IDLE_WORKERS), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: LeaderWorkerSet/ci: Available (1/1 groups ready, 2 pods each)" in done.stdout
    assert "leader serving on 127.0.0.2" in logs(tmp_path, "ci-0/triton-inference-server.log")
    assert (tmp_path / "logs" / "ci-0-1" / "triton-inference-server.log").exists()


@pytest.mark.integration
@pytest.mark.slow
def test_worker_given_a_wrong_leader_address_fails_naming_it(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        worker = _lws(objects)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        worker["env"].append({"name": "PET_MASTER_ADDR", "value": "ci-7.ci.default"})

    objects = _render(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    done = run_harness(tmp_path, objects, timeout=120, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: LeaderWorkerSet/ci: group 0: a container exited before the set was Available" in done.stdout
    assert "  pod ci-0-" in done.stdout and ", container triton-inference-server" in done.stdout
    assert "cannot reach the leader ci-7.ci.default:8000" in done.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_leader_failing_its_readiness_probe_fails_naming_it(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        leader = _lws(objects)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        leader["readinessProbe"]["httpGet"]["path"] = "/v2/health/planted"

    objects = _render(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    done = run_harness(tmp_path, objects, timeout=20, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: LeaderWorkerSet/ci: group 0: leader not Ready within --timeout 20 s" in done.stdout
    assert "  pod ci-0, container triton-inference-server" in done.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_leader_ready_startup_policy_creates_workers_only_once_the_leader_is_ready(tmp_path: Path) -> None:
    """``startupPolicy: LeaderReady``: with idle workers the set becomes Available (the worker created after the
    leader's probe succeeded); a leader that waits for its workers' registration then never becomes Ready, and no
    worker pod is started."""
    def leader_ready(objects: list[dict[str, Any]]) -> None:
        _lws(objects)["spec"]["startupPolicy"] = "LeaderReady"

    idle = tmp_path / "idle"
    idle.mkdir()
    done = run_harness(idle, _render(idle, "default-values.yaml", IDLE_WORKERS), timeout=120, edit=leader_ready)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: LeaderWorkerSet/ci: Available (1/1 groups ready, 2 pods each)" in done.stdout
    assert (idle / "logs" / "ci-0-1" / "triton-inference-server.log").exists()

    waiting = tmp_path / "waiting"
    waiting.mkdir()
    objects = _render(waiting, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    done = run_harness(waiting, objects, timeout=15, edit=leader_ready)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: LeaderWorkerSet/ci: group 0: leader not Ready within --timeout 15 s" in done.stdout
    assert sorted(p.name for p in (waiting / "logs").iterdir()) == ["ci-0"]


@pytest.mark.integration
@pytest.mark.slow
def test_a_failed_worker_recreates_its_whole_group_under_max_restarts(tmp_path: Path) -> None:
    """``restartPolicy: RecreateGroupOnPodRestart`` (the chart's): with ``--max-restarts 1`` the failing worker's
    group, leader included, starts again under the same names before the run fails."""
    objects = _render(tmp_path, "runtime-workers-values.yaml", RUNTIME_WORKERS)
    worker = _lws(objects)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
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
