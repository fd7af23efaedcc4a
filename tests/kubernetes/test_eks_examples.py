"""The EKS example pipelines (one per chart family): their rendered manifests are golden files and
every object passes the Kubernetes 1.33 schemas (strict) or its CRD schema.

Refresh with ``pytest tests/kubernetes/test_eks_examples.py --update-golden`` and review the diff (only that
flag writes golden files; a missing one fails).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mlrecipe.backends.registry import get_backend
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.golden import check_golden, normalize
from tests.repo import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "kubernetes" / "eks"
PIPELINES = sorted((EXAMPLES / "eks").glob("*/pipeline.yaml"))
RUNTIME_BLOB = re.compile(r'^(\s*step_runtime\.py: ).*$', re.MULTILINE)
SCRIPT_BLOB = re.compile(r'^(\s*)([\w.-]+--[\w.-]+): ".*$', re.MULTILINE)  # a tree chart's framework script
FLAT_SCRIPT_BLOB = re.compile(r'^(\s*)(openai_api\.py): ".*$', re.MULTILINE)  # a serving chart's framework script


def _runner(path: Path) -> ReleaseRunner:
    inputs = {"kind": "pipeline", "path": str(path), "sets": []}
    spec = spec_from_inputs(inputs)
    assert spec.backend == "kubernetes"
    return ReleaseRunner(spec, get_backend("kubernetes"), inputs, QuietDisplay())


@pytest.mark.parametrize("path", PIPELINES, ids=[p.parent.name for p in PIPELINES])
def test_eks_example_golden_and_valid(path: Path, mlhome: Path, update_golden: bool) -> None:
    text = normalize(_runner(path).materialize(), [(str(REPO), "$REPO")])
    text = RUNTIME_BLOB.sub(r"\1<the step runtime, checked by tests/charts/test_vendoring.py>", text)
    text = SCRIPT_BLOB.sub(lambda m: f"{m.group(1)}{m.group(2)}: <{m.group(2).replace('--', '/')} of the chart's "
                           "scripts/, checked by tests/charts/test_framework_delivery.py>", text)
    text = FLAT_SCRIPT_BLOB.sub(lambda m: f"{m.group(1)}{m.group(2)}: <the chart's scripts/vllm-*/{m.group(2)}, "
                                "checked by tests/charts/test_rayserve_scripts.py>", text)
    check_golden(GOLDEN / f"{path.parent.name}.yaml", text, update_golden)
    objects = [o for o in yaml.safe_load_all(_runner(path).materialize()) if o]
    assert objects
    assert validate_manifests(objects) == []


def test_eks_training_example_requests_gpus_efa_and_queues() -> None:
    text = _runner(EXAMPLES / "eks" / "training" / "pipeline.yaml").materialize()
    objects = [o for o in yaml.safe_load_all(text) if o]
    jobs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PyTorchJob"}
    pretrain = jobs["pytorchjob-llama-pretrain-pretrain"]
    assert pretrain["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "ml-gpu-efa"
    assert pretrain["spec"]["runPolicy"]["backoffLimit"] == 10  # restarts resume from the newest checkpoint
    pod = pretrain["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] in (8, "8") and limits["vpc.amazonaws.com/efa"] in (4, "4")
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "p4d.24xlarge"
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {"pv-fsx", "pv-efs"}
