"""RayJob through the harness as KubeRay v1.5.2 runs it: the ray-data-process chart's ci scenario (a head and one
worker pod with KubeRay's ``ray start`` commands, the submitter's ``ray job submit`` against the real dashboard), and
the planted defects: an entrypoint that fails, a worker given a wrong head address."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubelet.controllers.rayjob import submit_command
from tests.kubelet_runs.scenarios import run_harness
from tests.repo import BIN, REPO, cli_env

CHART = "data-prep/ray-data-process"
#: the entrypoint (the step runtime on the head) runs this: a task on every node, the env KubeRay gave the head
PROBE = """\
import os, socket, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]

@ray.remote(num_cpus=1)
def where():
    return socket.gethostname()

hosts = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in nodes])
print("ray nodes", sorted(n["NodeManagerAddress"] for n in nodes), "hosts", sorted(hosts), flush=True)
for name in ("RAY_CLUSTER_NAME", "RAY_PORT", "RAY_USAGE_STATS_KUBERAY_IN_USE", "KUBERAY_GEN_RAY_START_CMD"):
    print(f"{name}={os.environ.get(name)}", flush=True)
"""
STAND_IN = """\
resources: {nnodes: 1}
process:
  command: [python3]
  args: [/fsx/ray_probe.py]
"""


def _render(tmp_path: Path) -> list[dict[str, Any]]:
    overlay = tmp_path / "stand-in.yaml"
    overlay.write_text(textwrap.dedent(STAND_IN))
    scenario = REPO / "charts" / "machine-learning" / CHART / "ci" / "default-values.yaml"
    out = subprocess.run([str(BIN / "mlrecipe"), "template", "kh", CHART, "-f", str(scenario), "-f", str(overlay),
                          "-b", "kubernetes"], env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True,
                         timeout=120, check=True)
    (tmp_path / "fsx").mkdir(exist_ok=True)
    (tmp_path / "fsx" / "ray_probe.py").write_text(PROBE)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _rayjob(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "RayJob")


def _logs(tmp_path: Path, pattern: str) -> str:
    found = sorted((tmp_path / "logs").glob(pattern))
    assert found, f"no log {pattern}"
    return "".join(p.read_text() for p in found)


def test_submit_command_is_kuberays() -> None:
    """The submitter's shell line for KubeRay's own test case (common/job_test.go
    TestBuildJobSubmitCommandWithK8sJobModeAndYAML, v1.5.2), joined as configureSubmitterContainer joins it."""
    spec = {"runtimeEnvYAML": "test: test", "metadata": {"testKey": "testValue"},
            "entrypoint": "echo no quote 'single quote' \"double quote\"", "entrypointNumCpus": 1,
            "entrypointNumGpus": 0.5, "entrypointResources": '{"Custom_1": 1, "Custom_2": 5.5}'}
    expected = ["if", "!", "ray", "job", "status", "--address", "http://127.0.0.1:8265", "testJobId", ">/dev/null",
                "2>&1", ";", "then", "ray", "job", "submit", "--address", "http://127.0.0.1:8265", "--no-wait",
                "--runtime-env-json", json.dumps('{"test":"test"}'), "--metadata-json",
                json.dumps('{"testKey":"testValue"}'), "--submission-id", "testJobId", "--entrypoint-num-cpus",
                "1.000000", "--entrypoint-num-gpus", "0.500000", "--entrypoint-resources",
                json.dumps('{"Custom_1": 1, "Custom_2": 5.5}'), "--", "echo no quote 'single quote' \"double quote\"",
                ";", "fi", ";", "ray", "job", "logs", "--address", "http://127.0.0.1:8265", "--follow", "testJobId"]
    assert submit_command(spec, "http://127.0.0.1:8265", "testJobId") == " ".join(expected)


@pytest.mark.integration
@pytest.mark.slow
def test_rayjob_runs_on_a_kuberay_cluster_and_succeeds(tmp_path: Path) -> None:
    done = run_harness(tmp_path, _render(tmp_path), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: RayJob/rayjob-kh: Complete (Ray job rayjob-kh-" in done.stdout
    submitter = _logs(tmp_path, "*/ray-job-submitter.log")
    head_dir = next((tmp_path / "logs").glob("rayjob-kh-*-head-*"))
    worker_dir = next((tmp_path / "logs").glob("rayjob-kh-*-processing-worker-*"))
    cluster = head_dir.name.rsplit("-head-", 1)[0]
    assert f"http://{cluster}-head-svc.default.svc.cluster.local:8265" in submitter
    assert f"ray nodes ['127.0.0.2', '127.0.0.3'] hosts {sorted([head_dir.name, worker_dir.name])}" in submitter
    assert f"RAY_CLUSTER_NAME={cluster}" in submitter
    assert "RAY_PORT=6379" in submitter and "RAY_USAGE_STATS_KUBERAY_IN_USE=1" in submitter
    assert ("KUBERAY_GEN_RAY_START_CMD=ray start --head  --block  --dashboard-agent-listen-port=52365  "
            "--dashboard-host=0.0.0.0  --metrics-export-port=8080 ") in submitter
    assert "GCS is ready." in (worker_dir / "wait-gcs-ready.log").read_text()


@pytest.mark.integration
@pytest.mark.slow
def test_rayjob_whose_entrypoint_fails_fails_naming_the_submitter(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        _rayjob(objects)["spec"]["entrypoint"] = "python3 -c 'print(\"planted failure\"); raise SystemExit(3)'"

    done = run_harness(tmp_path, _render(tmp_path), timeout=300, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: RayJob/rayjob-kh: Failed (AppFailed): Ray job rayjob-kh-" in done.stdout
    assert "FAILED" in done.stdout.split("Failed (AppFailed)")[1].splitlines()[0]
    assert ", container ray-job-submitter" in done.stdout and "  pod rayjob-kh-" in done.stdout
    assert "planted failure" in done.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_ray_worker_with_a_wrong_head_address_fails_naming_it(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        group = _rayjob(objects)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
        group["rayStartParams"] = {"address": "rayjob-kh-wrong-head-svc:6379"}

    done = run_harness(tmp_path, _render(tmp_path), timeout=60, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not Ready within --timeout 60 s" in done.stdout
    assert "-processing-worker-" in done.stdout and ", container ray-worker" in done.stdout
    assert "Failed to connect to GCS at address rayjob-kh-wrong-head-svc:6379" in done.stdout
