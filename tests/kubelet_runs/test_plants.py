"""Defects planted in rendered streams: the harness fails each, naming it (pod, container, message or log)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.kubelet_runs.scenarios import containers, of_kind, render, run_harness

pytestmark = pytest.mark.integration

RUNTIME = ["python3", "/etc/mlrecipe/step_runtime.py", "/etc/mlrecipe/step.json"]


def test_mpijob_worker_running_the_step_program_fails(tmp_path: Path) -> None:
    """The MPIJob charts before a264ed7: the worker ran the step runtime instead of sshd."""
    def plant(objects: list[dict[str, Any]]) -> None:
        worker = of_kind(objects, "MPIJob")["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["command"] = RUNTIME

    done = run_harness(tmp_path, render(tmp_path, "mpijob"), edit=plant)
    assert done.returncode == 1, done.stdout
    assert "FAILED: MPIJob/dist-data-process-kh: Failed: the launcher failed" in done.stdout
    assert "worker pod dist-data-process-kh-worker-0 container worker exited (code " in done.stdout
    assert ("while the job ran: an MPIJob worker must keep serving ssh for mpirun; it ran: python3 "
            "/etc/mlrecipe/step_runtime.py /etc/mlrecipe/step.json") in done.stdout


def test_env_missing_from_the_launchers_x_list_fails(tmp_path: Path) -> None:
    """The MPIJob charts before a264ed7: the block's env was not exported (-x) to the ranks mpirun starts."""
    def plant(objects: list[dict[str, Any]]) -> None:
        launcher = of_kind(objects, "MPIJob")["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        line = launcher["containers"][0]["args"][0]
        assert " -x DATA_DIR " in line
        launcher["containers"][0]["args"][0] = line.replace(" -x DATA_DIR ", " ")

    done = run_harness(tmp_path, render(tmp_path, "mpijob"), edit=plant)
    assert done.returncode == 1, done.stdout
    assert "FAILED: MPIJob/dist-data-process-kh: Failed: the launcher failed" in done.stdout
    assert "container launcher" in done.stdout and "KeyError: 'DATA_DIR'" in done.stdout


@pytest.mark.slow
def test_wrong_master_addr_fails(tmp_path: Path) -> None:
    """torchrun keeps retrying a master it cannot resolve (as on a cluster, for its rendezvous timeout): the harness's
    --timeout ends the run, naming the pod and the unresolvable name in its log."""
    def plant(objects: list[dict[str, Any]]) -> None:
        config = next(o for o in objects if o["kind"] == "ConfigMap" and "step.json" in o["data"])
        assert "--master_addr $PET_MASTER_ADDR" in config["data"]["step.json"]
        config["data"]["step.json"] = config["data"]["step.json"].replace(
            "--master_addr $PET_MASTER_ADDR", "--master_addr pytorchjob-kh-master")

    done = run_harness(tmp_path, render(tmp_path, "pytorchjob"), timeout=25, edit=plant)
    assert done.returncode == 1, done.stdout
    assert "FAILED: PyTorchJob/pytorchjob-kh: did not finish within --timeout 25 s" in done.stdout
    assert "pod pytorchjob-kh-master-0, container pytorch" in done.stdout
    tail = done.stdout.split("last lines of its log:")[-1]
    assert re.search(r"\(pytorchjob-kh-master, 23456\) cannot be retrieved", tail), done.stdout


def test_secret_key_that_does_not_exist_fails_the_pod(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        objects.insert(0, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                           "stringData": {"token": "x"}})
        for container in containers(of_kind(objects, "Job")):
            container["env"].append({"name": "HF_TOKEN", "valueFrom": {
                "secretKeyRef": {"name": "creds", "key": "hf_token"}}})

    done = run_harness(tmp_path, render(tmp_path, "job"), edit=plant)
    assert done.returncode == 1, done.stdout
    assert "FAILED: Job/data-process-kh" in done.stdout
    assert "CreateContainerConfigError: couldn't find key hf_token in Secret default/creds" in done.stdout
    assert "container data-process" in done.stdout


def test_configmap_mounted_at_the_wrong_path_fails(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        for container in containers(of_kind(objects, "Job")):
            for mount in container["volumeMounts"]:
                if mount["mountPath"] == "/etc/mlrecipe":
                    mount["mountPath"] = "/opt/mlrecipe"

    done = run_harness(tmp_path, render(tmp_path, "job"), edit=plant)
    assert done.returncode == 1, done.stdout
    assert "FAILED: Job/data-process-kh" in done.stdout
    assert "can't open file '/etc/mlrecipe/step_runtime.py'" in done.stdout
