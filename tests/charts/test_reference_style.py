"""Recipes in the reference's style (``tests/assets/reference_style/``), checked by validating and rendering.

What users of the reference rely on: "valid" means "renders" (an empty ``image:`` fails ``validate``, at its
line, saying what to set), the reference's object names for a one-step install (``kubectl logs -f
pytorchjob-REL-worker-0``) with unique names per pipeline step, the release keys as labels and annotations
(Kubeflow Pipelines' helm component finds pods and Services by the annotations), the HyperPod overlay's job
auto-resume annotations, Ray Serve's engine defaults, data preparation done in ``pre_script`` alone, the
reference's images planned in the environments ``make`` created (no variable), and the Mask R-CNN tutorial's
charts from their legacy keys (Horovod over an MPIJob; Jupyter and TensorBoard behind TLS and a password).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.registry import get_backend
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.spec.load import load_pipeline, load_step_release
from tests.charts.chart_cases import pod_templates
from tests.repo import BIN, REPO, cli_env

ASSETS = REPO / "tests" / "assets" / "reference_style"
RELEASE = "bert"
NS = "kubeflow-user-example-com"


def mlrecipe(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mlrecipe"), *args], capture_output=True, text=True, env=cli_env(home),
                          timeout=300)


def plan(chart: str, *recipes: str, backend: str = "kubernetes", release: str = RELEASE) -> Any:
    """The plan of a one-step ``install release chart -f recipe...`` on ``backend`` (nothing submitted)."""
    spec = load_step_release(release, chart, [str(ASSETS / r) for r in recipes], namespace=NS)
    ctx = ReleaseContext(release, NS, backend, Path("/state"), tuple(s.name for s in spec.steps))
    return get_backend(backend).plan(spec.steps[0], ctx, {})


def objects(chart: str, *recipes: str) -> list[dict[str, Any]]:
    objs = plan(chart, *recipes).objects
    assert validate_manifests(objs) == []
    return objs


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind)


# -- 1. valid means renders -------------------------------------------------------------------------------------

@pytest.mark.integration
def test_an_empty_image_fails_validate_at_its_line_saying_what_to_set(mlhome: Path, tmp_path: Path) -> None:
    recipe = ASSETS / "empty-image.yaml"
    chart = "training/pytorchjob-distributed"
    line = next(i for i, text in enumerate(recipe.read_text().splitlines(), 1) if text.startswith("image:"))
    expected = f"{recipe}:{line}: image: required: set image to the container image"
    assert mlrecipe(mlhome, "validate", str(recipe), "--chart", chart).returncode == 0, "the spec alone is fine"
    for args in (["validate", str(recipe), "--chart", chart, "--backend", "kubernetes"],
                 ["install", RELEASE, chart, "-f", str(recipe), "--backend", "kubernetes", "--dry-run"]):
        done = mlrecipe(mlhome, *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert expected in done.stderr, done.stderr
        assert "execution error" not in done.stderr, "the template's error is mapped to the recipe's field"
    as_json = mlrecipe(mlhome, "validate", str(recipe), "--chart", chart, "-b", "kubernetes", "-o", "json")
    report = json.loads(as_json.stdout)
    assert report["valid"] is False
    assert report["errors"] == [{"file": str(recipe), "line": line, "path": "image", "message": report["errors"][0][
        "message"]}]
    assert report["errors"][0]["message"].startswith("required: set image to")
    # In a pipeline the error names the recipe file the step reads, not the pipeline.
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(f"release: r\nsteps:\n  - name: train\n    chart: {chart}\n    recipe: {recipe}\n")
    done = mlrecipe(mlhome, "run", str(pipeline), "-b", "kubernetes", "--dry-run")
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert not (mlhome / "releases").exists(), "validation writes nothing"


def test_an_image_map_without_name_fails_at_image_name(tmp_path: Path) -> None:
    recipe = tmp_path / "server.yaml"
    recipe.write_text("server:\n  command: [python3, serve.py]\nimage:\n  pull_policy: Always\n")
    spec = load_step_release(RELEASE, "serving/generic-server", [str(recipe)])
    with pytest.raises(Exception) as caught:
        get_backend("kubernetes").plan(spec.steps[0], ReleaseContext(RELEASE, NS, "kubernetes", Path("/s")), {})
    issue = caught.value.issues[0]  # type: ignore[attr-defined]
    assert (issue.file, issue.line, issue.path) == (str(recipe), 3, "image.name")
    assert issue.message.startswith("required: set image.name to")


# -- 2. pre_script only ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["local", "slurm", "kubernetes"])
def test_a_pre_script_only_recipe_plans_on_every_backend(backend: str) -> None:
    text = plan("data-prep/data-process", "data-prep-pre-script.yaml", backend=backend).materialize()
    assert 'prepared $DATA_DIR on $HOSTNAME' in text
    assert "empty command" not in text


@pytest.mark.integration
def test_a_pre_script_only_recipe_runs_locally(mlhome: Path) -> None:
    recipe = ASSETS / "data-prep-pre-script.yaml"
    done = mlrecipe(mlhome, "install", "coco", "data-prep/data-process", "-f", str(recipe))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "prepared /fsx/data/coco on" in mlrecipe(mlhome, "logs", "coco").stdout
    written = mlhome / "volumes" / "pv-fsx" / "data" / "coco" / "annotations.txt"
    assert written.read_text() == "annotations for coco\n"


# -- 3. the reference's names and metadata -----------------------------------------------------------------------

@pytest.mark.parametrize(("chart", "recipe", "kind", "name"), [
    ("training/pytorchjob-distributed", "accelerate-train.yaml", "PyTorchJob", f"pytorchjob-{RELEASE}"),
    ("data-prep/data-process", "data-prep-pre-script.yaml", "Job", f"data-process-{RELEASE}"),
    ("data-prep/mpijob-data-process", "mpi-data-prep.yaml", "MPIJob", f"dist-data-process-{RELEASE}"),
    ("serving/rayserve", "rayserve-vllm.yaml", "RayService", RELEASE),
    ("serving/generic-server", "generic-server.yaml", "Deployment", RELEASE),
    ("serving/generic-server", "generic-server.yaml", "Service", RELEASE),
])
def test_a_one_step_install_has_the_reference_names(chart: str, recipe: str, kind: str, name: str) -> None:
    step_plan = plan(chart, recipe)
    assert step_plan.helm_release == RELEASE, "helm list shows the release the user named"
    assert by_kind(step_plan.objects, kind)["metadata"]["name"] == name


def test_the_steps_of_a_pipeline_keep_unique_names(tmp_path: Path) -> None:
    recipe = ASSETS / "accelerate-train.yaml"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: bert\nsteps:\n" + "".join(
        f"  - name: {n}\n    chart: training/pytorchjob-distributed\n    recipe: {recipe}\n" for n in ("a", "b")))
    spec = load_pipeline(pipeline)
    ctx = ReleaseContext("bert", "default", "kubernetes", Path("/s"), ("a", "b"))
    plans = [get_backend("kubernetes").plan(step, ctx, {}) for step in spec.steps]
    assert [p.helm_release for p in plans] == ["bert-a", "bert-b"]
    assert [by_kind(p.objects, "PyTorchJob")["metadata"]["name"] for p in plans] == ["pytorchjob-bert-a",
                                                                                   "pytorchjob-bert-b"]


@pytest.mark.parametrize(("chart", "recipe"), [
    ("training/pytorchjob-distributed", "accelerate-train.yaml"),
    ("data-prep/data-process", "data-prep-pre-script.yaml"),
    ("data-prep/mpijob-data-process", "mpi-data-prep.yaml"),
    ("serving/rayserve", "rayserve-vllm.yaml"),
    ("serving/generic-server", "generic-server.yaml"),
])
def test_pods_services_and_workloads_carry_the_release_annotations(chart: str, recipe: str) -> None:
    objs = objects(chart, recipe)
    keys = {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/managed-by": "Helm"}
    templates = [t for o in objs for t in pod_templates(o.get("spec"))]
    assert templates
    for template in templates:  # the helm component lists pods and matches these annotations
        assert keys.items() <= template["metadata"]["annotations"].items()
        assert keys.items() <= template["metadata"]["labels"].items()
    for obj in objs:
        if obj["kind"] not in ("ConfigMap", "HorizontalPodAutoscaler"):  # Services and workload objects
            assert keys.items() <= (obj["metadata"].get("annotations") or {}).items(), obj["kind"]


def test_the_hyperpod_overlay_renders_the_documented_auto_resume_annotations() -> None:
    job = by_kind(objects("training/pytorchjob-distributed", "accelerate-train.yaml", "hyperpod.yaml"), "PyTorchJob")
    annotations = job["metadata"]["annotations"]
    # SageMaker HyperPod's "job auto-resume" documentation (Running jobs using kubectl) names these two.
    assert annotations["sagemaker.amazonaws.com/enable-job-auto-resume"] == "true"
    assert annotations["sagemaker.amazonaws.com/job-max-retry-count"] == "3"
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        assert spec["restartPolicy"] == "OnFailure", "auto-resume needs OnFailure"
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.p4d.24xlarge"
        keys = [t["key"] for t in pod["tolerations"]]
        assert keys == ["nvidia.com/gpu", "sagemaker.amazonaws.com/node-health-status"]


def test_hyperpod_auto_restart_false_and_own_tolerations(tmp_path: Path) -> None:
    overlay = tmp_path / "hp.yaml"
    overlay.write_text("hyperpod:\n  enabled: true\n  auto_restart: false\n  tolerations:\n"
                       "    - {key: example.com/hp, operator: Exists, effect: NoSchedule}\n")
    step_plan = plan("training/pytorchjob-distributed", "accelerate-train.yaml", str(overlay))
    job = by_kind(step_plan.objects, "PyTorchJob")
    assert not any(k.startswith("sagemaker.amazonaws.com/") for k in job["metadata"]["annotations"])
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert [t["key"] for t in pod["tolerations"]] == ["nvidia.com/gpu", "example.com/hp"]
    assert validate_manifests(step_plan.objects) == []


def test_rayserve_engine_config_gets_the_reference_defaults_under_the_recipe() -> None:
    objs = objects("serving/rayserve", "rayserve-vllm.yaml")
    config_map = next(o for o in objs if o["metadata"]["name"] == f"engine-config-{RELEASE}")
    config = json.loads(config_map["data"]["engine-config.json"])
    assert config["disable_log_stats"] is True, "the reference chart's default"
    assert config["enable_log_requests"] is True, "the recipe's own value wins over the default (false)"
    assert config["tensor_parallel_size"] == 8


# -- 4. images the project knows run in the environments make created -------------------------------------------

def test_a_reference_ray_image_plans_in_the_serving_environment_with_no_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not (REPO / ".venv-vllm" / "bin" / "python").exists():
        pytest.skip("no .venv-vllm beside the project's .venv (make serve-env creates it)")
    monkeypatch.delenv("MLRECIPE_IMAGES", raising=False)
    text = plan("serving/rayserve", "rayserve-vllm.yaml", backend="local").materialize()
    assert f"image rayproject/ray:2.52.1-py311-gpu runs in the local environment {REPO}/.venv-vllm" in text
    assert f"VIRTUAL_ENV={REPO}/.venv-vllm" in text


# -- 5. the Mask R-CNN tutorial's charts -------------------------------------------------------------------------

def test_the_legacy_horovod_keys_shape_the_mpijob() -> None:
    objs = objects("training/mpijob-horovod-tensorflow-gpu", "horovod-maskrcnn.yaml")
    job = by_kind(objs, "MPIJob")
    assert job["metadata"]["name"] == f"mpijob-{RELEASE}"
    assert job["spec"]["slotsPerWorker"] == 8
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == 2
    pod = workers["template"]["spec"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "p4d.24xlarge"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in launcher["env"]}
    assert {k: env[k] for k in ("HOROVOD_AUTOTUNE", "HOROVOD_LOG_LEVEL", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG",
                                "TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "TF_ENABLE_AUTO_MIXED_PRECISION")} == {
        "HOROVOD_AUTOTUNE": "0", "HOROVOD_LOG_LEVEL": "WARNING", "NCCL_SOCKET_IFNAME": "^lo,docker0,veth_def_agent",
        "NCCL_DEBUG": "WARN", "TF_DEVICE_MIN_SYS_MEMORY_IN_MB": "8192", "TF_ENABLE_AUTO_MIXED_PRECISION": "1"}
    command = " ".join(launcher["args"] if "args" in launcher else launcher["command"])
    assert "mpirun -np 16" in command and "-x HOROVOD_AUTOTUNE" in command and "-x NCCL_SOCKET_IFNAME" in command


@pytest.mark.integration
def test_the_legacy_horovod_recipe_validates_and_plans_on_every_backend(mlhome: Path) -> None:
    recipe = str(ASSETS / "horovod-maskrcnn.yaml")
    for backend in ("local", "slurm", "kubernetes"):
        done = mlrecipe(mlhome, "validate", recipe, "--chart", "training/mpijob-horovod-tensorflow-gpu", "-b", backend)
        assert done.returncode == 0, backend + ": " + done.stdout + done.stderr
    text = plan("training/mpijob-horovod-tensorflow-gpu", "horovod-maskrcnn.yaml", backend="local").materialize()
    assert "PET_NNODES=2 " in text and "PET_NPROC_PER_NODE=8 " in text and "LOG_DIR=/fsx/bert/train_log" in text


def test_the_maskrcnn_jupyter_keys_shape_the_testing_chart() -> None:
    objs = objects("testing/jupyter", "jupyter-tensorboard.yaml")
    service, deployment = by_kind(objs, "Service"), by_kind(objs, "Deployment")
    assert service["metadata"]["name"] == deployment["metadata"]["name"] == RELEASE
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerSourceRanges"] == ["203.0.113.7/32"], "open to global.source_cidr alone"
    nginx_conf = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"{RELEASE}-nginx")
    conf = "\n".join(nginx_conf["data"].values())
    assert "allow 203.0.113.7/32;" in conf and "deny all;" in conf and "ssl_certificate" in conf
    assert "tensorboard:$apr1$0bXpEYTb$" in conf, "the htpasswd hash, as the reference's ConfigMap held it"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "g5.xlarge"
    containers = {c["name"]: c for c in pod["containers"]}
    assert {"jupyter", "tensorboard", "nginx"} <= containers.keys()
    tensorboard = " ".join(containers["tensorboard"].get("command", []) + containers["tensorboard"].get("args", []))
    assert "/fsx/bert/train_log" in tensorboard and "127.0.0.1" in tensorboard
    token = next(e for e in containers["jupyter"]["env"] if e["name"] == "JUPYTER_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": f"{RELEASE}-jupyter-token", "key": "token",
                                                  "optional": True}, "the token comes from a Secret, never a value"
    assert not any(o["kind"] == "Secret" for o in objs), "no Secret with a credential is rendered"


def test_the_testing_chart_plans_locally_on_127_0_0_1_without_credentials() -> None:
    text = plan("testing/jupyter", "jupyter-tensorboard.yaml", backend="local").materialize()
    assert "MLRECIPE_SERVER_HOST=127.0.0.1" in text
    assert "correct horse" not in text and "JUPYTER_TOKEN=" not in text
