"""RayJob renderings beyond ``test_ray.py``'s one scenario, through the harness (KubeRay v1.5.2): the ``raytrain``
chart's ci scenarios (the runtime-env one pip-installs ``transformers==4.57.1`` into the job's runtime env, so it
needs the package index) and ``examples/eks/ray``'s pipeline as ``mlrecipe run --dry-run -b kubernetes`` prints it
(two RayJobs of a head and two workers each, sharing the ``pv-fsx`` / ``pv-efs`` claims; its scripts, which the
pipeline expects under ``$HOME/code`` on EFS, are the stand-ins of :mod:`tests.kubelet_runs.ray_cases`), a bare
RayCluster (the ray-data-process RayJob's cluster spec), and a worker given a wrong head address (it fails naming
the worker after the harness timeout). Not named ``test_*.py``: 1-4 minutes each; run by ``make kubelet-scenarios``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubelet_runs.ray_cases import PREPROCESS, RAYJOB_STAND_IN, TRAIN, logs, render
from tests.kubelet_runs.scenarios import run_harness
from tests.repo import BIN, EXAMPLES, REPO, cli_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STAND_IN = """\
resources: {nnodes: 1}
train:
  command: [python3]
  args: [/fsx/ray_probe.py]
"""


@pytest.mark.parametrize("scenario", ["default-values.yaml", "runtime-env-values.yaml"])
def test_raytrain_ci_scenario_runs(tmp_path: Path, scenario: str) -> None:
    done = run_harness(tmp_path, render(tmp_path, "training/raytrain", scenario, STAND_IN), timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: RayJob/rayjob-kh: Complete (Ray job rayjob-kh-" in done.stdout
    assert "ray nodes ['127.0.0.2', '127.0.0.3']" in logs(tmp_path, "*/ray-job-submitter.log")


def test_eks_ray_example_runs_both_rayjobs(tmp_path: Path) -> None:
    out = subprocess.run([str(BIN / "mlrecipe"), "run", str(EXAMPLES / "eks" / "ray" / "pipeline.yaml"), "--dry-run",
                          "-b", "kubernetes"], env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True,
                         timeout=120, check=True)
    objects = [o for o in yaml.safe_load_all(out.stdout) if o]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "RayJob"] == [
        "rayjob-ray-sft-preprocess", "rayjob-ray-sft-train"]
    stream = tmp_path / "stream.yaml"
    stream.write_text(out.stdout)
    fsx, code = tmp_path / "fsx", tmp_path / "efs" / "home" / "ray-sft" / "code"
    fsx.mkdir()
    code.mkdir(parents=True)
    (code / "preprocess.py").write_text(PREPROCESS)
    (code / "ray_train_sft.py").write_text(TRAIN)
    done = subprocess.run([sys.executable, "-m", "tests.kubelet", str(stream), "--logs", str(tmp_path / "logs"),
                           "--timeout", "800", "--pvc", f"pv-fsx={fsx}", "--pvc", f"pv-efs={tmp_path / 'efs'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: RayJob/rayjob-ray-sft-preprocess: Complete" in done.stdout
    assert "ok: RayJob/rayjob-ray-sft-train: Complete" in done.stdout
    assert "preprocess wrote 4 shards to /fsx/ray-sft/data on 3 Ray nodes" in logs(
        tmp_path, "rayjob-ray-sft-preprocess-?????/ray-job-submitter.log")
    assert "train read 4 shards, sum 14, transformers ['4.57.1']" in logs(
        tmp_path, "rayjob-ray-sft-train-?????/ray-job-submitter.log")


def test_bare_raycluster_becomes_ready(tmp_path: Path) -> None:
    def as_raycluster(objects: list[dict[str, Any]]) -> None:
        job = next(o for o in objects if o["kind"] == "RayJob")
        objects[objects.index(job)] = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                       "metadata": {"name": "rc-kh"}, "spec": job["spec"]["rayClusterSpec"]}

    objects = render(tmp_path, "data-prep/ray-data-process", "default-values.yaml", RAYJOB_STAND_IN)
    done = run_harness(tmp_path, objects, timeout=300, edit=as_raycluster)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: RayCluster/rc-kh: ready (2 Ray pods ready)" in done.stdout
    assert "GCS is ready." in logs(tmp_path, "rc-kh-processing-worker-*/wait-gcs-ready.log")


def test_ray_worker_with_a_wrong_head_address_fails_naming_it(tmp_path: Path) -> None:
    def plant(objects: list[dict[str, Any]]) -> None:
        group = next(o for o in objects if o["kind"] == "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
        group["rayStartParams"] = {"address": "rayjob-kh-wrong-head-svc:6379"}

    objects = render(tmp_path, "data-prep/ray-data-process", "default-values.yaml", RAYJOB_STAND_IN)
    done = run_harness(tmp_path, objects, timeout=60, edit=plant)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not Ready within --timeout 60 s" in done.stdout
    assert "-processing-worker-" in done.stdout and ", container ray-worker" in done.stdout
    assert "Failed to connect to GCS at address rayjob-kh-wrong-head-svc:6379" in done.stdout
