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
from tests.conftest import EXAMPLES, REPO
from tests.golden import check_golden, interpreter_replacements, normalize

GOLDEN = REPO / "tests" / "golden" / "frameworks"
FRAMEWORKS = sorted(p.parent.name for p in (EXAMPLES / "frameworks").glob("*/pipeline.yaml"))
RUNTIME_BLOB = re.compile(r'^(\s*step_runtime\.py: ).*$', re.MULTILINE)
SCRIPT_BLOB = re.compile(r'^(\s*)([\w.-]+--[\w.-]+): ".*$', re.MULTILINE)  # a tree chart's framework script


def _runner(path: Path, backend: str, options: dict | None = None) -> ReleaseRunner:
    inputs = {"kind": "pipeline", "path": str(path), "sets": []}
    return ReleaseRunner(spec_from_inputs(inputs), get_backend(backend, options or {}), inputs, QuietDisplay())


def test_every_framework_example_has_a_cpu_and_an_eks_pipeline() -> None:
    assert "accelerate" in FRAMEWORKS
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
    assert any("vpc.amazonaws.com/efa" in str(o["spec"]) and "p4d.24xlarge" in str(o["spec"]) for o in gpu_jobs)
    shown = RUNTIME_BLOB.sub(r"\1<the step runtime, checked by tests/charts/test_vendoring.py>", text)
    shown = SCRIPT_BLOB.sub(lambda m: f"{m.group(1)}{m.group(2)}: <{m.group(2).replace('--', '/')} of the "
                            "chart's scripts/, checked by tests/charts/test_framework_delivery.py>", shown)
    check_golden(GOLDEN / f"{framework}-eks.yaml", normalize(shown, [(str(REPO), "$REPO")]), update_golden)
