"""RayJob and RayService through the harness as KubeRay v1.5.2 runs them: the ray-data-process chart's ci scenario
(a head and one worker pod with KubeRay's ``ray start`` commands, the submitter's ``ray job submit`` against the real
dashboard), the rayserve chart's with a stand-in Serve application, and the planted defects: an entrypoint that
fails, a head Service without a dashboard port (the wrong head address plant is in ``ray_scenarios.py``, run by
``make kubelet-scenarios``: it waits for the harness timeout)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.kubelet.controllers.rayjob import submit_command
from tests.kubelet_runs.ray_cases import RAYJOB_STAND_IN, logs, render
from tests.kubelet_runs.scenarios import run_harness

CHART = "data-prep/ray-data-process"


#: the rayserve chart's ci scenario with a stand-in Serve application (and the head's ports as the scenario has them)
SERVE_STAND_IN = """\
ray:
  serve_config_v2:
    serveConfigV2: |
      applications:
        - name: hello
          import_path: hello:app
          route_prefix: /
          runtime_env:
            env_vars:
              PYTHONPATH: "/fsx"
resources: {min_replicas: 1, max_replicas: 1}
"""
def _render(tmp_path: Path) -> list[dict[str, Any]]:
    return render(tmp_path, CHART, "default-values.yaml", RAYJOB_STAND_IN)


def _rayjob(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "RayJob")


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
    submitter = logs(tmp_path, "*/ray-job-submitter.log")
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


def _rayservice(tmp_path: Path) -> list[dict[str, Any]]:
    """The rayserve ci scenario as rendered: its head ports are gcs and serve; the chart adds Ray's dashboard port,
    through which KubeRay reaches the Serve API."""
    return render(tmp_path, "serving/rayserve", "vllm-values.yaml", SERVE_STAND_IN)


@pytest.mark.integration
@pytest.mark.slow
def test_rayservice_becomes_ready_with_its_serve_application_running(tmp_path: Path) -> None:
    """Ready as KubeRay sets it: the Serve application RUNNING and the serve Service answering. A worker joining is
    no part of that condition (the harness may end before the worker's ``ray start`` has printed anything), so it is
    not asserted here: the RayJob test above proves KubeRay's worker command joins the head (tasks ran on both
    pods)."""
    done = run_harness(tmp_path, _rayservice(tmp_path), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: RayService/kh: ready (Serve applications RUNNING: hello; kh-serve-svc answers)" in done.stdout
    assert list((tmp_path / "logs").glob("kh-*-serving-worker-*")), "the worker group's pod was started"


@pytest.mark.integration
@pytest.mark.slow
def test_rayservice_without_a_dashboard_port_fails_naming_the_head_service(tmp_path: Path) -> None:
    """A head whose named ports lack "dashboard" (planted: the chart adds it): KubeRay's head Service then has no
    dashboard port and the Serve applications are never submitted."""
    def plant(objects: list[dict[str, Any]]) -> None:
        service = next(o for o in objects if o["kind"] == "RayService")
        head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        head["ports"] = [p for p in head["ports"] if p["name"] != "dashboard"]

    done = run_harness(tmp_path, _rayservice(tmp_path), timeout=120, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: RayService/kh: Service kh-" in done.stdout
    assert "-head-svc: dashboard port is not found" in done.stdout and "  pod kh-" in done.stdout
