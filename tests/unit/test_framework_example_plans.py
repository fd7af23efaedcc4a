"""The framework examples (``examples/frameworks/<framework>/``) as plans: golden Slurm batch scripts of the
CPU pipelines and golden EKS manifests of the ``pipeline-eks.yaml`` variants, every object valid for Kubernetes.

The scripts' text in the framework ConfigMap is replaced by the file it comes from (tests/charts/
test_framework_delivery.py checks that the ConfigMap carries every file byte for byte). Refresh with
``pytest tests/unit/test_framework_example_plans.py --update-golden`` and review the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from mlrecipe.backends.registry import get_backend
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.golden import check_golden, interpreter_replacements, normalize
from tests.repo import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "frameworks"
FRAMEWORKS = sorted(p.parent.name for p in (EXAMPLES / "frameworks").glob("*/pipeline.yaml"))
FINE_TUNING = [f for f in FRAMEWORKS if f != "megatron"]  # megatron pretrains (test_megatron_example_plans.py)
RUNTIME_BLOB = re.compile(r'^(\s*step_runtime\.py: ).*$', re.MULTILINE)
SCRIPT_BLOB = re.compile(r'^(\s*)([\w.-]+--[\w.-]+): ".*$', re.MULTILINE)  # a tree chart's framework script
TOP_SCRIPT_BLOB = re.compile(r'^(\s*)(?!step_runtime\.py)([\w.-]+\.py): ".*$', re.MULTILINE)  # at the tree's top


def _runner(path: Path, backend: str, options: dict | None = None) -> ReleaseRunner:
    inputs = {"kind": "pipeline", "path": str(path), "sets": []}
    return ReleaseRunner(spec_from_inputs(inputs), get_backend(backend, options or {}), inputs, QuietDisplay())


def _pod_groups(job: dict) -> list[tuple[int, dict]]:
    """(replicas, pod template) of each pod group of a PyTorchJob or a RayJob (the Ray head counts once)."""
    if job["kind"] == "PyTorchJob":
        return [(g.get("replicas", 1), g["template"]) for g in job["spec"]["pytorchReplicaSpecs"].values()]
    cluster = job["spec"]["rayClusterSpec"]
    return [(1, cluster["headGroupSpec"]["template"]),
            *((g.get("replicas", 1), g["template"]) for g in cluster.get("workerGroupSpecs", []))]


def test_every_framework_example_has_a_cpu_and_an_eks_pipeline() -> None:
    assert {"accelerate", "pytorch_lightning", "ray_train"} <= set(FRAMEWORKS)
    for name in FRAMEWORKS:
        assert (EXAMPLES / "frameworks" / name / "pipeline-eks.yaml").is_file(), name


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_framework_example_on_slurm_golden(framework: str, mlhome: Path, update_golden: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    text = _runner(EXAMPLES / "frameworks" / framework / "pipeline.yaml", "slurm", {"master_port": 29500}).materialize()
    assert "bound at /etc/framework-scripts" in text
    text = normalize(text, [(str(mlhome), "$MLRECIPE_HOME"), *interpreter_replacements(), (str(REPO), "$REPO")])
    check_golden(GOLDEN / f"{framework}-slurm.txt", text, update_golden)
    assert not (mlhome / "releases").exists(), "materializing a plan writes nothing"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_framework_example_on_eks_golden_and_valid(framework: str, mlhome: Path, update_golden: bool) -> None:
    text = _runner(EXAMPLES / "frameworks" / framework / "pipeline-eks.yaml", "kubernetes").materialize()
    objects = [o for o in yaml.safe_load_all(text) if o]
    assert validate_manifests(objects) == []
    gpu_jobs = [o for o in objects if o["kind"] in ("PyTorchJob", "RayJob")
                and "nvidia.com/gpu" in str(o["spec"])]
    assert gpu_jobs, "the EKS variant runs on GPU nodes"
    assert any("vpc.amazonaws.com/efa" in str(o["spec"]) and re.search(r"p4de?\.24xlarge", str(o["spec"]))
               for o in gpu_jobs)
    shown = RUNTIME_BLOB.sub(r"\1<the step runtime, checked by tests/charts/test_vendoring.py>", text)
    shown = SCRIPT_BLOB.sub(lambda m: f"{m.group(1)}{m.group(2)}: <{m.group(2).replace('--', '/')} of the "
                            "chart's scripts/, checked by tests/charts/test_framework_delivery.py>", shown)
    shown = TOP_SCRIPT_BLOB.sub(lambda m: f"{m.group(1)}{m.group(2)}: <{m.group(2)} of the chart's scripts/, checked "
                                "by tests/charts/test_framework_delivery.py>", shown)
    check_golden(GOLDEN / f"{framework}-eks.yaml", normalize(shown, [(str(REPO), "$REPO")]), update_golden)


@pytest.mark.parametrize("framework", FINE_TUNING)
def test_framework_example_fine_tunes_on_two_p4d_nodes_with_efa(framework: str, mlhome: Path) -> None:
    """The EKS fine-tuning runs on 2 x p4d.24xlarge, each pod with the node's 8 GPUs and 4 EFA interfaces (and the
    tolerations for both); conversion and evaluation take one GPU on a g6e node."""
    text = _runner(EXAMPLES / "frameworks" / framework / "pipeline-eks.yaml", "kubernetes").materialize()
    jobs = {o["metadata"]["labels"]["mlrecipe.io/step"]: o for o in yaml.safe_load_all(text)
            if o and o["kind"] in ("PyTorchJob", "RayJob")}
    assert sorted(jobs) == ["convert", "evaluate", "fine-tune"]
    for step, job in jobs.items():
        gpu_pods = 0
        for replicas, template in _pod_groups(job):
            spec = template["spec"]
            for container in spec["containers"]:
                requests = container.get("resources", {}).get("requests", {})
                if "nvidia.com/gpu" not in requests:
                    continue
                gpu_pods += replicas
                limits = container["resources"]["limits"]
                tolerated = {t["key"] for t in spec.get("tolerations", [])}
                if step == "fine-tune":
                    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}, step
                    assert requests["nvidia.com/gpu"] == limits["nvidia.com/gpu"] == "8", step
                    assert requests["vpc.amazonaws.com/efa"] == limits["vpc.amazonaws.com/efa"] == "4", step
                    assert {"nvidia.com/gpu", "vpc.amazonaws.com/efa"} <= tolerated, step
                    assert {"name": "FI_PROVIDER", "value": "efa"} in container["env"], step
                else:
                    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "g6e.2xlarge"}, step
                    assert requests["nvidia.com/gpu"] == limits["nvidia.com/gpu"] == "1", step
                    assert "nvidia.com/gpu" in tolerated, step
        assert gpu_pods == (2 if step == "fine-tune" else 1), (step, gpu_pods)
