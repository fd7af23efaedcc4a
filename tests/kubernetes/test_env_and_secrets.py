"""The Kubernetes backend honours the env contract and keeps credentials out of the manifests.

- The pipeline's env (``MLRECIPE_<STEP>_URL`` of earlier serving steps) reaches every container of a
  later step through ``mlrecipe-lib.pipeline_env``; a local ``MLRECIPE_PIPELINE_DIR`` does not.
- Credential-like env values become a Secret (printed masked, created outside the Helm release) and a
  ``valueFrom.secretKeyRef`` in every container that had them; the value is in no manifest.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.kubernetes import secrets
from mlrecipe.backends.kubernetes.backend import KubernetesBackend
from mlrecipe.backends.kubernetes.plan import KubernetesPlan
from mlrecipe.backends.registry import get_backend
from mlrecipe.credentials import MASK
from mlrecipe.helm.render import chart_path, render_chart
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.spec.catalog import CATALOG
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.load import load_step_release
from tests.repo import BIN, EXAMPLES, REPO, cli_env

CHARTS = REPO / "charts" / "machine-learning"
TOKEN = "hf_s3cr3tT0kenValue"
URL = "http://quickstart-serve.default.svc.cluster.local:8000"


#: Containers that run no recipe code, so carry none of its env: KubeRay's job submitter and the init container
#: that copies the framework scripts.
NO_STEP_ENV = ("ray-job-submitter", "init-framework-scripts")

def _containers(obj: Any) -> list[dict[str, Any]]:
    """Every container of every pod template in ``obj`` (found wherever a pod spec sits)."""
    found: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                found += [c for c in value if isinstance(c, dict)]
            else:
                found += _containers(value)
    elif isinstance(obj, list):
        for item in obj:
            found += _containers(item)
    return found


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env") or []}


def _cli(mlhome: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mlrecipe"), *args], capture_output=True, text=True, env=cli_env(mlhome),
                          cwd=REPO, timeout=300, check=False)


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _ctx(release: str = "envtest") -> ReleaseContext:
    return ReleaseContext(release, "default", "kubernetes", Path("/state"))


# --- the env contract -------------------------------------------------------------------------------------------

@pytest.mark.integration
def test_quickstart_client_gets_the_serve_url_through_the_real_runner(mlhome: Path) -> None:
    result = _cli(mlhome, "run", str(EXAMPLES / "quickstart" / "pipeline.yaml"), "--backend", "kubernetes",
                  "--dry-run")
    assert result.returncode == 0, result.stderr
    docs = _docs(result.stdout)
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["labels"]["mlrecipe.io/step"] == "serve")
    port = service["spec"]["ports"][0]["port"]
    assert f"http://{service['metadata']['name']}.default.svc.cluster.local:{port}" == URL
    client = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["labels"]["mlrecipe.io/step"] == "client")
    containers = _containers(client)
    assert containers
    for container in containers:
        env = _env(container)
        assert env["MLRECIPE_SERVE_URL"] == {"name": "MLRECIPE_SERVE_URL", "value": URL}
        assert "MLRECIPE_PIPELINE_DIR" not in env, "a path of this machine means nothing in a pod"
    for step in ("data", "train", "evaluate", "serve"):  # no step sees a URL of a later step
        for doc in docs:
            if doc["metadata"].get("labels", {}).get("mlrecipe.io/step") == step:
                assert all("MLRECIPE_SERVE_URL" not in _env(c) for c in _containers(doc))
    assert "# note: MLRECIPE_PIPELINE_DIR" in result.stdout
    assert validate_manifests(docs) == []
    assert not (mlhome / "releases").exists(), "a dry run writes no state"


def _step(chart: str, tmp_path: Path, overlay: dict[str, Any]):
    """The chart's first ci scenario with ``overlay`` on top (and a command where the chart needs one)."""
    base = sorted((CHARTS / chart / "ci").glob("*.yaml"))[0]
    if CATALOG[chart].needs_command:
        block = CATALOG[chart].block
        overlay = {**overlay, block: {"command": ["python3", "run.py"], **overlay.get(block, {})}}
    extra = tmp_path / "overlay.yaml"
    extra.write_text(yaml.safe_dump(overlay))
    return load_step_release("envtest", chart, [str(base), str(extra)], namespace="default").steps[0]


def _env_key(chart: str) -> tuple[str, ...]:
    """The env list a chart's pods get (rayserve has no command block: ray.env)."""
    return ("ray", "env") if chart == "serving/rayserve" else (CATALOG[chart].block, "env")


def _overlay(chart: str, entries: list[dict[str, str]]) -> dict[str, Any]:
    first, second = _env_key(chart)
    return {first: {second: entries}}


#: The charts with a Kubernetes workload (a SageMaker endpoint has none: the backend refuses it).
KUBERNETES_CHARTS = sorted(name for name, info in CATALOG.items() if info.kind in KubernetesBackend.kinds)


@pytest.mark.parametrize("chart", KUBERNETES_CHARTS)
def test_pipeline_env_and_secret_refs_reach_every_container(chart: str, tmp_path: Path, mlhome: Path) -> None:
    secret_name = "WANDB_API_KEY"
    step = _step(chart, tmp_path, _overlay(chart, [
        {"name": secret_name, "value": TOKEN},
        {"name": "RUN_HOME", "value": "/efs/home/{{ .Release.Name }}"},
    ]))
    env = {"MLRECIPE_PIPELINE_DIR": "/fsx/pipelines/demo", "MLRECIPE_SERVE_URL": URL,
           "MLRECIPE_OTHER_DIR": "/home/someone/pipeline"}
    plan = get_backend("kubernetes").plan(step, _ctx(), env)
    assert isinstance(plan, KubernetesPlan)
    assert TOKEN not in plan.manifest_text and TOKEN not in str(plan.values)
    assert "kind: Secret" not in plan.manifest_text, "the Secret is not part of the Helm release"
    assert [s["stringData"] for s in plan.secrets] == [{secret_name: TOKEN}]
    name = plan.secrets[0]["metadata"]["name"]
    assert name == f"envtest-{step.name}-env" and plan.secrets[0]["metadata"]["namespace"] == "default"
    containers = [c for c in _containers(plan.objects) if c["name"] not in NO_STEP_ENV]
    assert containers
    for container in containers:
        got = _env(container)
        assert got["MLRECIPE_SERVE_URL"]["value"] == URL, container["name"]
        assert got["MLRECIPE_PIPELINE_DIR"]["value"] == "/fsx/pipelines/demo", "under a pvc mount: passed"
        assert "MLRECIPE_OTHER_DIR" not in got, "a local path no volume mounts is left out"
        assert got[secret_name] == {"name": secret_name, "valueFrom": {"secretKeyRef": {"name": name,
                                                                                          "key": secret_name}}}
        assert got["RUN_HOME"]["value"] == "/efs/home/envtest", "Helm expressions still work for plain vars"
    assert validate_manifests(plan.objects) == []
    shown = plan.materialize()
    assert TOKEN not in shown and f"{secret_name}: '{MASK}'" in shown


def test_recipe_env_wins_over_pipeline_env_without_duplicates(tmp_path: Path) -> None:
    step = _step("data-prep/data-process", tmp_path, {"process": {"env": [
        {"name": "MLRECIPE_SERVE_URL", "value": "http://elsewhere:9000"}]}})
    plan = get_backend("kubernetes").plan(step, _ctx(), {"MLRECIPE_SERVE_URL": URL})
    for container in _containers(plan.objects):
        names = [e["name"] for e in container["env"]]
        assert names.count("MLRECIPE_SERVE_URL") == 1
        assert _env(container)["MLRECIPE_SERVE_URL"]["value"] == "http://elsewhere:9000"


@pytest.mark.parametrize("chart", ["training/mpijob", "data-prep/mpijob-data-process"])
def test_mpirun_exports_the_pipeline_env_to_every_rank(chart: str, tmp_path: Path) -> None:
    step = _step(chart, tmp_path, {"mpirun": {"env": [{"name": "HF_TOKEN", "value": TOKEN}]}})
    plan = get_backend("kubernetes").plan(step, _ctx(), {"MLRECIPE_SERVE_URL": URL})
    job = plan.workload()
    assert job is not None and job["kind"] == "MPIJob"
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert "-x MLRECIPE_SERVE_URL " in launcher["args"][0]
    assert _env(launcher)["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "HF_TOKEN"
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert "HF_TOKEN" not in _env(worker), "only the containers that had the variable get it"
    assert TOKEN not in plan.manifest_text


def test_hf_snapshot_top_level_env_secret(tmp_path: Path) -> None:
    step = _step("model-prep/hf-snapshot", tmp_path, {"env": [{"name": "S3_SECRET_ACCESS_KEY", "value": TOKEN}]})
    plan = get_backend("kubernetes").plan(step, _ctx(), {})
    assert TOKEN not in plan.manifest_text
    (container,) = _containers(plan.objects)
    assert _env(container)["S3_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "envtest-hf-snapshot-env"
    assert plan.secrets[0]["stringData"] == {"S3_SECRET_ACCESS_KEY": TOKEN}


SERVE_CONFIG = f"""\
applications:
  - name: llama3
    import_path: openai_api:deployment
    runtime_env:
      env_vars:
        ENGINE_CONFIG: /etc/engine-config/engine-config.json
        HF_TOKEN: {TOKEN}
"""


@pytest.mark.parametrize("chart,ray", [
    ("serving/rayserve", {"serve_config_v2": {"serveConfigV2": SERVE_CONFIG}}),
    ("training/raytrain", {"runtime_env_yaml": {"pip": ["x==1"], "env_vars": {"HF_TOKEN": TOKEN, "A": "b"}}}),
    ("data-prep/ray-data-process", {"runtime_env_yaml": {"runtimeEnvYAML": f"env_vars:\n  HF_TOKEN: {TOKEN}\n"}}),
])
def test_ray_runtime_env_credentials_move_to_the_containers(chart: str, ray: dict[str, Any],
                                                             tmp_path: Path) -> None:
    step = _step(chart, tmp_path, {"ray": ray})
    plan = get_backend("kubernetes").plan(step, _ctx(), {})
    assert TOKEN not in plan.manifest_text and TOKEN not in str(plan.values)
    assert plan.secrets[0]["stringData"] == {"HF_TOKEN": TOKEN}
    containers = [c for c in _containers(plan.objects) if c["name"] not in NO_STEP_ENV]
    assert len(containers) == 2
    for container in containers:
        assert _env(container)["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "HF_TOKEN"
    workload = plan.workload()
    assert workload is not None
    if chart == "serving/rayserve":
        served = yaml.safe_load(workload["spec"]["serveConfigV2"])
        assert served["applications"][0]["runtime_env"]["env_vars"] == {
            "ENGINE_CONFIG": "/etc/engine-config/engine-config.json"}
    else:
        left = yaml.safe_load(workload["spec"]["runtimeEnvYAML"])["env_vars"]
        assert left == ({"A": "b"} if chart == "training/raytrain" else {}), "other env_vars stay"
    assert any("Ray runtime env" in n for n in plan.notes)
    assert validate_manifests(plan.objects) == []


# --- credentials ------------------------------------------------------------------------------------------------

RECIPE = """\
image: nvcr.io/nvidia/pytorch:24.10-py3
resources: {nnodes: 2}
train:
  env:
    - {name: HF_TOKEN, value: %s}
    - {name: API_KEY_FROM_TPL, value: "k-{{ .Release.Name }}-%s"}
    - {name: HOME, value: "/efs/home/{{ .Release.Name }}"}
  command: [python3]
  args: [train.py]
"""


@pytest.mark.integration
def test_dry_run_masks_the_token_and_references_the_secret(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "train.yaml"
    recipe.write_text(RECIPE % (TOKEN, TOKEN))
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: tok\nnamespace: ml\nsteps:\n"
                        "  - {name: train, chart: training/pytorchjob-distributed, recipe: train.yaml}\n")
    for args in (["run", str(pipeline), "--backend", "kubernetes", "--dry-run"],
                 ["template", "tok", "training/pytorchjob-distributed", "-f", str(recipe), "--backend",
                  "kubernetes", "--namespace", "ml"]):
        result = _cli(mlhome, *args)
        assert result.returncode == 0, result.stderr
        assert TOKEN not in result.stdout + result.stderr
        docs = _docs(result.stdout)
        (secret,) = [d for d in docs if d["kind"] == "Secret"]
        assert secret["stringData"] == {"API_KEY_FROM_TPL": MASK, "HF_TOKEN": MASK}
        assert secret["metadata"]["namespace"] == "ml"
        (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
        specs = job["spec"]["pytorchReplicaSpecs"]
        assert set(specs) == {"Master", "Worker"}
        for replica in specs.values():
            (container,) = replica["template"]["spec"]["containers"]
            env = _env(container)
            for key in ("HF_TOKEN", "API_KEY_FROM_TPL"):
                assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {
                    "name": secret["metadata"]["name"], "key": key}}}
            assert env["HOME"]["value"] == "/efs/home/tok"
        assert validate_manifests(docs) == []
    assert not (mlhome / "releases").exists()


def test_the_secret_holds_the_evaluated_values(tmp_path: Path) -> None:
    recipe = tmp_path / "train.yaml"
    recipe.write_text(RECIPE % (TOKEN, "x"))
    step = load_step_release("tok", "training/pytorchjob-distributed", [str(recipe)], namespace="ml").steps[0]
    plan = get_backend("kubernetes").plan(step, ReleaseContext("tok", "ml", "kubernetes", Path("/s")), {})
    assert plan.secrets[0]["stringData"] == {"API_KEY_FROM_TPL": "k-tok-x", "HF_TOKEN": TOKEN}
    assert any("HF_TOKEN" in n and plan.secrets[0]["metadata"]["name"] in n for n in plan.notes)
    assert step.values["train"]["env"][0]["value"] == TOKEN, "the step's own values are left alone"


def test_one_name_with_two_values_is_a_spec_error(tmp_path: Path) -> None:
    step = _step("training/mpijob", tmp_path, {"mpirun": {"env": [{"name": "HF_TOKEN", "value": "a"}]},
                                                "train": {"env": [{"name": "HF_TOKEN", "value": "b"}]}})
    with pytest.raises(SpecError, match=r"HF_TOKEN has different values in train\.env and mpirun\.env"):
        get_backend("kubernetes").plan(step, _ctx(), {})


def test_a_plain_helm_install_renders_the_library_interface() -> None:
    """What mlrecipe hands the chart works for anyone: pipeline_env and secret_env under mlrecipe-lib."""
    values = {
        "image": "busybox", "resources": {"nnodes": 1},
        "process": {"env": [{"name": "TOKEN"}, {"name": "A", "value": "{{ .Release.Name }}"}],
                    "command": ["true"]},
        "mlrecipe-lib": {"pipeline_env": [{"name": "MLRECIPE_X_URL", "value": "http://x:1/{{ raw }}"}],
                         "secret_env": {"name": "my-secret", "keys": {"TOKEN": "token"}}},
    }
    objects = render_chart(chart_path("data-prep/data-process"), values, "rel", "default")
    (container,) = _containers(objects)
    env = _env(container)
    assert env["TOKEN"] == {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "my-secret", "key": "token"}}}
    assert env["A"]["value"] == "rel"
    assert env["MLRECIPE_X_URL"]["value"] == "http://x:1/{{ raw }}", "pipeline values are literal"
    names = [e["name"] for e in container["env"]]
    assert names.index("MLRECIPE_X_URL") < names.index("A"), "pipeline env first: $(VAR) references work"
    assert validate_manifests(objects) == []


# --- the pure functions -----------------------------------------------------------------------------------------

def test_secret_name_fits_a_dns_name() -> None:
    assert secrets.secret_name("rel", "train") == "rel-train-env"
    long = secrets.secret_name("r" * 40, "s" * 40)
    assert len(long) <= 63 and not long.startswith("-") and long != secrets.secret_name("r" * 40, "s" * 41)


def test_split_env_keeps_plain_and_empty_values() -> None:
    plain, found = secrets.split_env([{"name": "HF_TOKEN", "value": "t"}, {"name": "GITHUB_TOKEN", "value": ""},
                                      {"name": "HOME", "value": "/h"}])
    assert plain == [{"name": "HF_TOKEN"}, {"name": "GITHUB_TOKEN", "value": ""}, {"name": "HOME", "value": "/h"}]
    assert found == {"HF_TOKEN": "t"}


def test_masked_does_not_touch_the_manifest() -> None:
    manifest = secrets.secret_manifest("s", "ns", {"B": "2", "A": "1"}, {"x": "y"})
    shown = secrets.masked(manifest)
    assert shown["stringData"] == {"A": MASK, "B": MASK}
    assert manifest["stringData"] == {"A": "1", "B": "2"}
    assert validate_manifests([shown]) == []
