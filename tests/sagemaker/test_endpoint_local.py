"""A serving/sagemaker-endpoint step in mode local, for real: the local client's model server answers
``/invocations`` with the archive's ``code/inference.py``; the step is serving at its 127.0.0.1 URL once the endpoint
is InService; a handler that cannot load ends the step Failed with the reason; ``cancel_handle`` (uninstall) stops
the server and deletes the model, config and endpoint."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.base import ReleaseContext, StepState
from mlrecipe.backends.host.nodes import group_members
from mlrecipe.backends.sagemaker.backend import SageMakerBackend
from mlrecipe.backends.sagemaker.endpoint import artifacts_var
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.spec.load import load_step_release

pytestmark = pytest.mark.integration
HANDLER = """
import json
def model_fn(model_dir):
    return json.load(open(model_dir + "/weights.json"))
def input_fn(body, content_type):
    return json.loads(body)["instances"]
def predict_fn(data, model):
    return [x * model["w"] for x in data]
def output_fn(prediction, accept):
    return json.dumps({"predictions": prediction}), "application/json"
"""
BROKEN = "def model_fn(model_dir):\n    raise RuntimeError('weights are corrupt')\n"


def archive(path: Path, handler: str) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (("weights.json", '{"w": 3}'), ("code/inference.py", handler)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.as_uri()


def endpoint_step(tmp_path: Path, handler: str):
    backend = SageMakerBackend(SageMakerOptions(mode="local", local_root=str(tmp_path / "sm"), poll_seconds=0.2))
    recipe = tmp_path / "endpoint.yaml"
    recipe.write_text("sagemaker: {model_from: train}\n")
    step = load_step_release("hyb", "serving/sagemaker-endpoint", [str(recipe)], [], "default").steps[0]
    ctx = ReleaseContext("hyb", "default", "sagemaker", tmp_path / "release")
    plan = backend.plan(step, ctx, {artifacts_var("train"): archive(tmp_path / "model.tar.gz", handler)})
    return backend, plan, ctx


def test_local_endpoint_serves_then_uninstall_stops_it(tmp_path: Path, mlhome: Path) -> None:
    backend, plan, ctx = endpoint_step(tmp_path, HANDLER)
    running = backend.submit(plan, ctx)
    try:
        outcome = running.wait(0.2)
        assert outcome.state is StepState.SERVING, outcome.message
        assert outcome.url is not None and outcome.url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(f"{outcome.url}/invocations", data=b'{"instances": [1, 2]}',
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read()) == {"predictions": [3, 6]}
        [record] = (tmp_path / "sm" / "endpoints").glob("*/endpoint.json")
        server = json.loads(record.read_text())["server"]
        assert group_members(server[0]), "the server's host group is found while it serves"
    finally:
        backend.cancel_handle(running.handle)
    assert group_members(server[0]) == [], "uninstall returned while a process of the server's host still ran"
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{outcome.url}/ping", timeout=5)
    assert not backend.handle_alive(running.handle)
    root = tmp_path / "sm"
    for kind in ("endpoints", "endpoint-configs", "models"):  # only the stores' lock files are left
        assert [p.name for p in (root / kind).iterdir() if not p.name.startswith(".")] == [], kind


def test_a_handler_that_cannot_load_fails_the_step_with_the_reason(tmp_path: Path, mlhome: Path) -> None:
    backend, plan, ctx = endpoint_step(tmp_path, BROKEN)
    running = backend.submit(plan, ctx)
    try:
        outcome = running.wait(0.2)
    finally:
        backend.cancel_handle(running.handle)
    assert outcome.state is StepState.FAILED
    assert f"endpoint {plan.endpoint_name} is Failed" in outcome.message
    assert "weights are corrupt" in outcome.message or "model server" in outcome.message


def test_model_data_may_be_a_directory_in_local_mode(tmp_path: Path, mlhome: Path) -> None:
    model = tmp_path / "volume" / "model"  # what a training step on another backend left on a shared volume
    (model / "code").mkdir(parents=True)
    (model / "weights.json").write_text('{"w": 5}')
    (model / "code" / "inference.py").write_text(HANDLER)
    backend = SageMakerBackend(SageMakerOptions(mode="local", local_root=str(tmp_path / "sm"), poll_seconds=0.2))
    recipe = tmp_path / "endpoint.yaml"
    recipe.write_text(f"sagemaker: {{model_from: train, model_data: '{model.as_uri()}'}}\n")  # model_data wins
    step = load_step_release("hyb", "serving/sagemaker-endpoint", [str(recipe)], [], "default").steps[0]
    ctx = ReleaseContext("hyb", "default", "sagemaker", tmp_path / "release")
    running = backend.submit(backend.plan(step, ctx, {}), ctx)
    try:
        outcome = running.wait(0.2)
        assert outcome.state is StepState.SERVING, outcome.message
        request = urllib.request.Request(f"{outcome.url}/invocations", data=b'{"instances": [2]}',
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read()) == {"predictions": [10]}
    finally:
        backend.cancel_handle(running.handle)


def test_a_truncated_archive_fails_at_once_and_uninstall_removes_every_record(tmp_path: Path, mlhome: Path) -> None:
    """Issue 41 R1 through the CLI: the step fails with the one-line reason (no ``Aborted!``), a re-run fails again
    at once instead of adopting a dead endpoint, and ``uninstall`` removes the endpoint, config and model, also
    those of a submission that failed part way (no handle in the state: found by their tags)."""
    from tests.integration.helpers import cli

    whole = Path(archive(tmp_path / "model.tar.gz", HANDLER + "#" * 200_000).removeprefix("file://")).read_bytes()
    (tmp_path / "model.tar.gz").write_bytes(whole[:len(whole) // 2])
    pipeline = tmp_path / "pipeline.yaml"
    url = (tmp_path / "model.tar.gz").as_uri()
    pipeline.write_text("release: cut\nsteps:\n  - {name: endpoint, chart: serving/sagemaker-endpoint, backend: "
                        f"sagemaker, values: {{sagemaker: {{model_data: '{url}'}}}}}}\n")
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("sagemaker: {mode: local, poll_seconds: 0.2}\n")
    stores = [mlhome / "sagemaker-local" / kind for kind in ("endpoints", "endpoint-configs", "models")]
    for attempt in (1, 2):
        result = cli(mlhome, "run", str(pipeline), timeout=120)  # the bound only stops a run that would wait
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Aborted!" not in result.stderr and "Traceback" not in result.stdout + result.stderr
        assert "is Failed: the model archive" in result.stdout and "cannot be read" in result.stdout, attempt
    [line] = [ln for ln in cli(mlhome, "status", "cut").stdout.splitlines() if "endpoint " in ln]
    assert "cannot be read" in line
    state = mlhome / "releases" / "local" / "default" / "cut" / "state.json"
    record = json.loads(state.read_text())
    record["steps"]["endpoint"]["handle"] = None  # as a submission that failed after CreateModel leaves it
    state.write_text(json.dumps(record))
    assert all(p for p in (list(s.glob("[!.]*")) for s in stores))
    result = cli(mlhome, "uninstall", "cut")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [p for s in stores for p in s.glob("[!.]*")] == []
    assert not state.parent.exists()
