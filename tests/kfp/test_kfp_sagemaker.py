"""``compile kfp`` of a hybrid pipeline (steps on SageMaker): a SageMaker step's task runs ``mlrecipe install -b
sagemaker`` with the pipeline's ``sagemaker_opts``; the training task's ``model_artifacts`` and ``job_name`` are
typed KFP outputs that later tasks get as ``MLRECIPE_TRAIN_*``, the endpoint task's ``url`` reaches the client task as
``MLRECIPE_ENDPOINT_URL``; credentials never enter the compiled file; and the compiled pipeline runs under kfp.local
with SageMaker's local mode (the endpoint deleted by ``mlrecipe uninstall``, from a home without its state too)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.golden import REPO, check_golden
from tests.kfp.kfp_env import PIPELINES, RUN_LOCAL, compile_kfp, kfp_python
from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration  # starts real processes

GOLDEN = REPO / "tests" / "golden" / "kfp"
HYBRID = REPO / "examples" / "sagemaker-hybrid" / "pipeline.yaml"
AWS_OPTS = ["-B", "sagemaker.region=us-west-2", "-B", "sagemaker.role_arn=arn:aws:iam::123456789012:role/mlrecipe-sm",
            "-B", "sagemaker.s3_prefix=s3://mlrecipe-runs/hybrid"]


def _plain(run: subprocess.CompletedProcess[str]) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)


def _compiled(mlhome: Path, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "hybrid-kfp.yaml"
    result = compile_kfp(mlhome, HYBRID, out, *AWS_OPTS)
    assert result.returncode == 0, result.stderr
    assert "SageMaker steps (train, endpoint)" in result.stdout and "IRSA" in result.stdout
    text = out.read_text(encoding="utf-8")
    return text, next(yaml.safe_load_all(text))


def test_hybrid_example_matches_golden(mlhome: Path, tmp_path: Path, update_golden: bool) -> None:
    text, _ = _compiled(mlhome, tmp_path)
    check_golden(GOLDEN / "sagemaker-hybrid.yaml", text, update_golden)


def test_sagemaker_tasks_have_their_backend_typed_outputs_and_stable_names(mlhome: Path, tmp_path: Path) -> None:
    _, spec = _compiled(mlhome, tmp_path)
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["sagemaker_opts"]["defaultValue"] == ("region=us-west-2,role_arn=arn:aws:iam::123456789012:role/"
                                                        "mlrecipe-sm,s3_prefix=s3://mlrecipe-runs/hybrid")
    tasks = spec["root"]["dag"]["tasks"]
    inputs = {name: task["inputs"]["parameters"] for name, task in tasks.items()}
    for name in ("train", "endpoint"):
        assert inputs[name]["backend"]["runtimeValue"]["constant"] == "sagemaker"
        assert inputs[name]["backend_opts"] == {"componentInputParameter": "sagemaker_opts"}
    for name in ("data", "client"):
        assert inputs[name]["backend"] == {"componentInputParameter": "backend"}
        assert inputs[name]["backend_opts"] == {"componentInputParameter": "backend_opts"}
    outputs = spec["components"]["comp-train"]["outputDefinitions"]["parameters"]
    assert outputs == {key: {"parameterType": "STRING"} for key in ("model_artifacts", "job_name", "endpoint_name",
                                                                     "url")}
    assert inputs["train"]["outputs"]["runtimeValue"]["constant"] == ["model_artifacts", "job_name"]
    assert inputs["endpoint"]["outputs"]["runtimeValue"]["constant"] == ["endpoint_name", "url"]
    for key in ("model_artifacts", "job_name"):
        assert inputs["endpoint"][key] == {"taskOutputParameter": {"outputParameterKey": key, "producerTask": "train"}}
    assert inputs["endpoint"]["inputs_from"]["runtimeValue"]["constant"] == {"model_artifacts": "train",
                                                                             "job_name": "train"}
    # the client task gets the endpoint's URL and name (its args read $MLRECIPE_ENDPOINT_URL and
    # $MLRECIPE_ENDPOINT_ENDPOINT_NAME) as typed inputs
    for key in ("endpoint_name", "url"):
        assert inputs["client"][key] == {"taskOutputParameter": {"outputParameterKey": key, "producerTask": "endpoint"}}
    assert inputs["client"]["inputs_from"]["runtimeValue"]["constant"] == {"endpoint_name": "endpoint",
                                                                           "url": "endpoint"}
    assert inputs["client"]["model_artifacts"]["runtimeValue"]["constant"] == ""
    # A retried task plans the same job: release and namespace are constants, nothing of the run or the attempt
    for task in inputs.values():
        assert task["release"]["runtimeValue"]["constant"] == "sagemaker-hybrid"
        assert task["namespace"]["runtimeValue"]["constant"] == "default"
    assert "{{$" not in json.dumps(inputs) and "PIPELINE_JOB" not in json.dumps(inputs).upper()


def test_aws_credentials_of_the_compiling_shell_never_reach_the_file(mlhome: Path, tmp_path: Path) -> None:
    """IRSA only: the keys of whoever compiles stay out, and so does a service account (KFP v2 sets one per run;
    kfp-kubernetes 2.17 has no per-task one)."""
    keys = {"AWS_ACCESS_KEY_ID": "AKIAQWERTYUIOPASDFGH", "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2VjEXAMPLETOKEN",
            "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENGbPxRfiCYzzzzSECRET"}
    out = tmp_path / "hybrid-kfp.yaml"
    result = compile_kfp(mlhome, HYBRID, out, *AWS_OPTS, env=keys)
    assert result.returncode == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert not any(value in text for value in keys.values())
    assert "AWS_" not in text and "aws_access_key" not in text.lower()
    assert "serviceAccount" not in text and "service_account" not in text
    platform = list(yaml.safe_load_all(text))[1:]
    executors = [e for doc in platform for e in doc["platforms"]["kubernetes"]["deploymentSpec"]["executors"].values()]
    assert all("secretAsEnv" not in e for e in executors)  # the hybrid example has no credentials at all


@pytest.mark.parametrize(("extra", "says"), [
    (["-B", "sagemaker.aws_secret_access_key=abc123"], "-B sagemaker.aws_secret_access_key=abc123: a credential"),
    (["-B", "sagemaker.endpoint_url=https://AKIAABCDEFGHIJKLMNOP@x"], "a credential is never written"),
    (["--set", "train.train.env[0].name=AWS_SECRET_ACCESS_KEY,train.train.env[0].value=s3cr3t"],
     "train.env[0].value: AWS_SECRET_ACCESS_KEY looks like a credential"),
])
def test_credentials_are_refused(extra: list[str], says: str, mlhome: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    result = compile_kfp(mlhome, PIPELINES / "sagemaker.yaml", out, *extra)
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr and "IRSA" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists() and "s3cr3t" not in result.stdout + result.stderr


def _run(home: Path, compiled: Path, out: Path, sagemaker: Path) -> subprocess.CompletedProcess[str]:
    """The compiled pipeline under kfp.local; ``sagemaker``: local mode's root (what SageMaker itself keeps)."""
    out.mkdir(exist_ok=True)
    env = {**cli_env(home), "KFP_TEST_OUT": str(out), "KFP_TEST_PIPELINES": str(PIPELINES)}
    return subprocess.run([kfp_python(), str(RUN_LOCAL), str(compiled), str(out.parent / "kfp-root"), "backend=local",
                           f"sagemaker_opts=mode=local,local_root={sagemaker}"], env=env, capture_output=True,
                          text=True, timeout=240, check=False)


def _endpoint_url(home: Path) -> str:
    argv = [str(BIN / "mlrecipe"), "status", "kfp-hybrid", "--backend", "sagemaker", "-o", "json"]
    status = subprocess.run(argv, env=cli_env(home), capture_output=True, text=True, timeout=60, check=True)
    (release,) = json.loads(status.stdout)
    return next(s["url"] for s in release["steps"] if s["name"] == "endpoint")


@pytest.mark.slow
def test_hybrid_pipeline_runs_under_kfp_local_in_sagemaker_local_mode(mlhome: Path, tmp_path: Path) -> None:
    compiled = tmp_path / "sagemaker-kfp.yaml"
    assert compile_kfp(mlhome, PIPELINES / "sagemaker.yaml", compiled).returncode == 0
    out, sagemaker, pod_home = tmp_path / "out", tmp_path / "sagemaker", tmp_path / "retried-pod-home"
    uninstall = [str(BIN / "mlrecipe"), "uninstall", "kfp-hybrid", "--backend", "sagemaker", "-B",
                 f"local_root={sagemaker}"]
    url = ""
    try:
        run = _run(mlhome, compiled, out, sagemaker)
        log = _plain(run)
        assert run.returncode == 0, log[-6000:]
        assert "Pipeline 'kfp-hybrid' finished with status SUCCESS" in log
        assert "-m mlrecipe install kfp-hybrid training/pytorchjob-distributed" in log
        assert "--backend sagemaker --backend-opt mode=local" in log
        job = (out / "job_name").read_text()  # the typed outputs reached the later task of the other backend
        assert re.fullmatch(r"kfp-hybrid-train-[0-9a-f]+-1", job)
        with tarfile.open(fileobj=io.BytesIO((out / "model.tar.gz").read_bytes())) as tar:
            assert {"weights.json", "code/inference.py"} <= set(tar.getnames())
        url = _endpoint_url(mlhome)  # the endpoint task served the training task's model archive
        request = urllib.request.Request(f"{url}/invocations", data=b'{"instances": [1, 2]}',
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.loads(answer.read()) == {"predictions": [3, 6]}
        # the client task got the endpoint task's typed output url as $MLRECIPE_ENDPOINT_URL, and it answered
        assert (out / "client-url").read_text() == url
        assert json.loads((out / "client-answer.json").read_text()) == {"predictions": [3, 6]}
        # A retried task is a new pod (no mlrecipe state of its own): its train step adopts the job, never a second
        again = _run(pod_home, compiled, out, sagemaker)
        assert again.returncode == 0, _plain(again)[-6000:]
        assert re.search(rf"training job {job} completed;[^)]*adopted: an earlier run", _plain(again))
        assert (out / "job_name").read_text() == job
        assert [p.name for p in (sagemaker / "training-jobs").iterdir() if not p.name.startswith(".")] == [job]
    finally:  # first from a machine without the release's state: found by its tags; then each pod's state
        fresh = subprocess.run([*uninstall, "-B", "mode=local"], env=cli_env(tmp_path / "fresh-home"),
                               capture_output=True, text=True, timeout=120, check=False)
        done = [subprocess.run(uninstall, env=cli_env(home), capture_output=True, text=True, timeout=120, check=False)
                for home in (mlhome, pod_home) if home.exists()]
    assert fresh.returncode == 0, fresh.stderr
    assert re.search(r"sagemaker: deleted endpoint, endpoint config, model kfp-hybrid-endpoint-", fresh.stdout)
    assert all(d.returncode == 0 for d in done), [d.stderr for d in done]
    assert url
    with pytest.raises(urllib.error.URLError):  # no endpoint server outlives the uninstall
        urllib.request.urlopen(f"{url}/ping", timeout=5)
