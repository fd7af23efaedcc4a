"""``training_api: v2``: the PyTorchJob charts render a Kubeflow Trainer v2 TrainJob whose node container runs what
the PyTorchJob's container runs (command, env with PET_*, volumes, resources), for every PyTorchJob example and
reference-style recipe; both renderings validate against their CRDs (``../shared/crds/``).

The v2 goldens: ``pytest tests/kubernetes/test_trainjob_rendering.py --update-golden`` (review the diff).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrecipe.backends.kubernetes.plan import KubernetesPlan
from mlrecipe.backends.registry import get_backend
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.golden import check_golden, normalize
from tests.kubernetes import trainer_v2
from tests.repo import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "kubernetes" / "trainjob"
ASSETS = REPO / "tests" / "assets" / "reference_style"
V2_CHARTS = ("training/pytorchjob-distributed", "training/pytorchjob-elastic")
RUNTIME_BLOB = re.compile(r'^(\s*step_runtime\.py: ).*$', re.MULTILINE)
SCRIPT_BLOB = re.compile(r'^(\s*)([\w.-]+--[\w.-]+): ".*$', re.MULTILINE)


def _pipeline(path: Path) -> dict[str, Any]:
    return {"kind": "pipeline", "path": str(path), "sets": []}


def _install(release: str, *files: Path) -> dict[str, Any]:
    return {"kind": "install", "release": release, "chart": "training/pytorchjob-distributed",
            "files": [str(f) for f in files], "sets": [], "namespace": "default"}


CASES: dict[str, dict[str, Any]] = {
    "quickstart": _pipeline(EXAMPLES / "quickstart" / "pipeline.yaml"),
    **{f"eks-{p.parent.name}": _pipeline(p) for p in sorted((EXAMPLES / "eks").glob("*/pipeline.yaml"))},
    **{f"frameworks-{p.parent.name}": _pipeline(p)
       for p in sorted((EXAMPLES / "frameworks").glob("*/pipeline-eks.yaml"))},
    "reference-style-ddp": _install("raw-ddp", EXAMPLES / "reference-style" / "pretrain-ddp.yaml"),
    "reference-style-accelerate": _install("acc", ASSETS / "accelerate-train.yaml"),
    "reference-style-hyperpod": _install("hp", ASSETS / "accelerate-train.yaml", ASSETS / "hyperpod.yaml"),
}


def _plans(inputs: dict[str, Any], api: str) -> dict[str, KubernetesPlan]:
    """Every step's plan with ``training_api: api`` (no cluster: the option decides)."""
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes", {"training_api": api}), inputs,
                           QuietDisplay())
    return {s.name: runner.backend.plan(s, runner.context) for s in runner.spec.steps
            if getattr(s, "backend", None) in (None, "kubernetes")}


def _kind(plan: KubernetesPlan, kind: str) -> list[dict[str, Any]]:
    return [o for o in plan.objects if o.get("kind") == kind]


def _env(container: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the recipe's env in order, the PET_* variables by name)."""
    env = container.get("env", [])
    return ([e for e in env if not e["name"].startswith("PET_")],
            {e["name"]: e.get("value") for e in env if e["name"].startswith("PET_")})


def _compare(v1: dict[str, Any], v2: dict[str, Any]) -> None:
    job, trainjob = _kind_one(v1, "PyTorchJob"), _kind_one(v2, "TrainJob")
    pod2 = trainer_v2.v2_pod(trainjob, trainer_v2.runtime())
    c2 = next(c for c in pod2["containers"] if c["name"] == "node")
    elastic = job["spec"].get("elasticPolicy")
    for pod1 in trainer_v2.v1_pods(job):
        c1 = pod1["containers"][0]
        for field in ("image", "command", "args", "resources", "volumeMounts"):
            assert c1.get(field) == c2.get(field), field
        recipe1, pet1 = _env(c1)
        recipe2, pet2 = _env(c2)
        assert recipe1 == recipe2, "the recipe's env, in order"
        assert set(trainer_v2.PET_NAMES) <= set(pet1) and set(trainer_v2.PET_NAMES) <= set(pet2)
        if not elastic:
            assert pet1["PET_NNODES"] == pet2["PET_NNODES"]
        if "nprocPerNode" in job["spec"]:
            assert pet1["PET_NPROC_PER_NODE"] == pet2["PET_NPROC_PER_NODE"]
        else:
            assert "numProcPerNode" not in trainjob["spec"]["trainer"]
        if elastic:  # the training operator's rendezvous settings are the TrainJob's env (no elastic TrainJob)
            assert pet2["PET_RDZV_BACKEND"] == elastic["rdzvBackend"] and pet2["PET_RDZV_ID"] == elastic["rdzvId"]
            assert pet2.get("PET_MAX_RESTARTS") == (str(elastic["maxRestarts"]) if "maxRestarts" in elastic else None)
        for field in ("nodeSelector", "tolerations"):
            assert pod1.get(field) == pod2.get(field), field
        framework = {"framework-scripts", "framework-scripts-flat"}
        assert ([v for v in pod1["volumes"] if v["name"] not in framework]
                == [v for v in pod2["volumes"] if v["name"] not in framework])
        inits = [c["name"] for c in pod1.get("initContainers", [])]
        assert inits in ([], ["init-framework-scripts"]) and "initContainers" not in pod2
        if inits:  # the init container's copy becomes a ConfigMap volume with one item per script, at its path
            scripts = next(v for v in pod2["volumes"] if v["name"] == "framework-scripts")["configMap"]
            cm = next(o for o in v1.objects if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"] == scripts["name"])
            assert sorted(i["key"] for i in scripts["items"]) == sorted(cm["data"])
            assert all(i["path"] == i["key"].replace("--", "/") for i in scripts["items"])
    meta2 = trainer_v2.merged_runtime(trainjob, trainer_v2.runtime())["spec"]["template"]["spec"][
        "replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    pod_meta1 = next(iter(job["spec"]["pytorchReplicaSpecs"].values()))["template"]["metadata"]
    for key in ("app.kubernetes.io/instance", "mlrecipe.io/step"):
        assert meta2["labels"][key] == pod_meta1["labels"][key]
    assert meta2["annotations"] == pod_meta1["annotations"]
    assert trainjob["metadata"]["labels"] == job["metadata"]["labels"]
    assert trainjob["metadata"]["annotations"] == job["metadata"]["annotations"]


def _kind_one(plan: KubernetesPlan, kind: str) -> dict[str, Any]:
    found = _kind(plan, kind)
    assert len(found) == 1, f"{plan.step}: {len(found)} {kind}"
    return found[0]


NO_PYTORCHJOB = {"eks-ray", "eks-serving", "frameworks-ray_train"}


@pytest.mark.parametrize("case", sorted(set(CASES) - NO_PYTORCHJOB))
def test_trainjob_runs_the_pytorchjob_container_and_both_validate(case: str, mlhome: Path) -> None:
    v1, v2 = _plans(CASES[case], "v1"), _plans(CASES[case], "v2")
    training = [name for name, plan in v1.items() if plan.chart in V2_CHARTS]
    assert training, f"{case} has no PyTorchJob step"
    for name in training:
        assert not _kind(v2[name], "PyTorchJob"), "v2 renders no PyTorchJob"
        _compare(v1[name], v2[name])
        assert validate_manifests(v1[name].objects) == []
        assert validate_manifests(v2[name].objects) == []
        merged = trainer_v2.merged_runtime(_kind_one(v2[name], "TrainJob"), trainer_v2.runtime())
        assert validate_manifests([merged]) == [], "the runtime, patched, is still a valid ClusterTrainingRuntime"
    for name, plan in v1.items():  # every other step renders the same under v2
        if name not in training:
            assert v2[name].manifest_text == plan.manifest_text


def test_charts_without_a_v2_equivalent_stay_on_their_operator_and_say_so(mlhome: Path) -> None:
    plans = {**_plans(CASES["frameworks-megatron"], "v2"), **{f"ray-{k}": p for k, p in
                                                                _plans(CASES["eks-ray"], "v2").items()}}
    mpi = [p for p in plans.values() if _kind(p, "MPIJob")]
    ray = [p for p in plans.values() if _kind(p, "RayJob")]
    assert mpi and ray
    for plan in [*mpi, *ray]:
        said = [n for n in plan.notes if n.startswith("training_api v2:")]
        assert len(said) == 1 and "no Kubeflow Trainer v2 equivalent" in said[0], plan.notes
    v1 = _plans(CASES["frameworks-megatron"], "v1")
    assert all(not [n for n in p.notes if "training_api" in n] for p in v1.values())


def test_training_runtime_option_names_the_runtime(mlhome: Path) -> None:
    inputs = CASES["reference-style-ddp"]
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend(
        "kubernetes", {"training_api": "v2", "training_runtime": "torch-distributed-efa"}), inputs, QuietDisplay())
    plan = runner.backend.plan(runner.spec.steps[0], runner.context)
    assert _kind_one(plan, "TrainJob")["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed-efa"}
    assert plan.workload() is _kind_one(plan, "TrainJob")


@pytest.mark.parametrize("case", ["reference-style-ddp", "eks-training"])
def test_trainjob_golden(case: str, mlhome: Path, update_golden: bool) -> None:
    inputs = CASES[case]
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes", {"training_api": "v2"}), inputs,
                           QuietDisplay())
    text = normalize(runner.materialize(), [(str(REPO), "$REPO")])
    text = RUNTIME_BLOB.sub(r"\1<the step runtime, checked by tests/charts/test_vendoring.py>", text)
    text = SCRIPT_BLOB.sub(lambda m: f"{m.group(1)}{m.group(2)}: <a script of the chart's scripts/>", text)
    check_golden(GOLDEN / f"{case}.yaml", text, update_golden)
    assert [o for o in yaml.safe_load_all(runner.materialize()) if o and o["kind"] == "TrainJob"]


@pytest.mark.parametrize("chart", V2_CHARTS)
def test_a_recipe_setting_a_variable_trainer_sets_is_refused_under_v2(chart: str) -> None:
    from mlrecipe.helm import render_chart
    from mlrecipe.helm.render import ChartRenderError, charts_root

    values = {"image": "img:1", "train": {"command": ["python3", "train.py"],
                                          "env": [{"name": "PET_MASTER_PORT", "value": "1234"}]}}
    assert render_chart(charts_root() / chart, values, "r", "ns"), "v1 renders it"
    with pytest.raises(ChartRenderError, match=r"train\.env sets PET_MASTER_PORT: with training_api v2"):
        render_chart(charts_root() / chart, {**values, "mlrecipe-lib": {"training_api": "v2"}}, "r", "ns")


def test_plain_helm_values_naming_an_unknown_training_api_are_refused() -> None:
    from mlrecipe.helm import render_chart
    from mlrecipe.helm.render import ChartRenderError, charts_root

    values = {"image": "img:1", "train": {"command": ["python3", "train.py"]}, "mlrecipe-lib": {"training_api": "v3"}}
    with pytest.raises(ChartRenderError, match="training_api"):
        render_chart(charts_root() / "training/pytorchjob-distributed", values, "r", "ns")
