"""Local SageMaker mode, hosting: a real HTTP server on 127.0.0.1 serving SageMaker's /ping and /invocations."""

from __future__ import annotations

import io
import json
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from mlrecipe.backends.host.nodes import alive
from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient
from tests.sagemaker.local_endpoints import model_archive, settled

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent

INFERENCE = textwrap.dedent('''
    import json, os
    from helper import scale
    def model_fn(model_dir):
        return {**json.load(open(os.path.join(model_dir, "weights.json"))), "dir": model_dir}
    def input_fn(body, content_type):
        assert content_type == "application/json", content_type
        return json.loads(body)["inputs"]
    def predict_fn(data, model):
        return [scale(x, model["w"]) + model["b"] for x in data]
    def output_fn(prediction, accept):
        return json.dumps({"outputs": prediction, "model_dir": os.environ["SM_MODEL_DIR"]}), "application/json"
''')
PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)  # the workshop posts images as application/x-image
FAILING = "def model_fn(model_dir):\n    raise RuntimeError('weights are corrupt')\n"


def _deploy(client: LocalSageMakerClient, name: str, model_url: str) -> None:
    client.create_model(ModelName=f"{name}-model", ExecutionRoleArn="arn:aws:iam::000000000000:role/local",
                        PrimaryContainer={"Image": "local/mlrecipe-serve:latest", "ModelDataUrl": model_url})
    client.create_endpoint_config(EndpointConfigName=f"{name}-config", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": f"{name}-model", "InitialInstanceCount": 1,
        "InstanceType": "ml.m5.large"}])
    client.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-config",
                           Tags=[{"Key": "mlrecipe/release", "Value": "r"}])


@pytest.fixture
def client(tmp_path: Path) -> Iterator[LocalSageMakerClient]:
    """A client on a fresh root; endpoints a failed test leaves behind are deleted."""
    local = LocalSageMakerClient(tmp_path / "sm", python_bin_dir=BIN)
    yield local
    for endpoint in local.list_endpoints()["Endpoints"]:
        local.delete_endpoint(EndpointName=endpoint["EndpointName"])


def test_endpoint_serves_the_archives_handler_and_is_gone_after_delete(client: LocalSageMakerClient,
                                                                        tmp_path: Path) -> None:
    url = model_archive(tmp_path / "model.tar.gz", {
        "weights.json": b'{"w": 2.0, "b": 1.0}', "code/inference.py": INFERENCE.encode(),
        "code/helper.py": b"def scale(x, w):\n    return x * w\n"})
    _deploy(client, "digits", url)
    assert client.describe_endpoint(EndpointName="digits")["EndpointStatus"] in ("Creating", "InService")
    out = settled(client, "digits")
    assert out["EndpointStatus"] == "InService", out.get("FailureReason")
    base = client.endpoint_url("digits")
    assert base.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(f"{base}/ping", timeout=10) as resp:
        assert resp.status == 200
    request = urllib.request.Request(f"{base}/invocations", data=b'{"inputs": [1, 2.5]}', method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        assert json.loads(resp.read()) == {"outputs": [3.0, 6.0], "model_dir": "/opt/ml/model"}
    for content_type, body, code in (("text/csv", b"1,2", 415), ("application/x-image", PNG, 415),
                                     ("application/json", b'{"inputs": ', 400)):
        bad = urllib.request.Request(f"{base}/invocations", data=body, method="POST",
                                     headers={"Content-Type": content_type})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=10)
        answer = err.value.read().decode()  # one line for the caller; the traceback is the server's log
        assert err.value.code == code and answer.count("\n") == 1 and "Traceback" not in answer, answer
        assert content_type in answer if code == 415 else answer.startswith("the request body cannot be read: ")
    arn = out["EndpointArn"]
    assert client.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "mlrecipe/release", "Value": "r"}]
    server = json.loads((tmp_path / "sm" / "endpoints" / "digits" / "endpoint.json").read_text())["server"]
    assert alive(server)

    client.delete_endpoint(EndpointName="digits")
    assert not alive(server)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/ping", timeout=5)
    with pytest.raises(ClientError) as gone:
        client.describe_endpoint(EndpointName="digits")
    assert gone.value.response["Error"]["Code"] == "ValidationException"
    client.delete_endpoint_config(EndpointConfigName="digits-config")
    client.delete_model(ModelName="digits-model")
    with pytest.raises(ClientError):
        client.describe_model(ModelName="digits-model")


def test_default_handler_serves_a_torchscript_model(client: LocalSageMakerClient, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="the default model_fn loads TorchScript")
    linear = torch.nn.Linear(2, 1)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0, 2.0]]))
        linear.bias.fill_(0.5)
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(linear), buf)
    _deploy(client, "torch", model_archive(tmp_path / "model.tar.gz", {"model.pt": buf.getvalue()}))
    out = settled(client, "torch", timeout=90)
    assert out["EndpointStatus"] == "InService", out.get("FailureReason")
    request = urllib.request.Request(f"{client.endpoint_url('torch')}/invocations", data=b"[[1, 1], [0, 2]]",
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert json.loads(resp.read()) == [[3.5], [4.5]]


def test_a_model_that_cannot_load_fails_the_endpoint(client: LocalSageMakerClient, tmp_path: Path) -> None:
    _deploy(client, "broken", model_archive(tmp_path / "model.tar.gz", {"code/inference.py": FAILING.encode()}))
    out = settled(client, "broken")
    assert out["EndpointStatus"] == "Failed"
    assert out["FailureReason"] == "RuntimeError: weights are corrupt"
    with pytest.raises(ClientError):
        client.endpoint_url("broken")
    with pytest.raises(ClientError) as err:
        client.create_endpoint(EndpointName="other", EndpointConfigName="no-such-config")
    assert err.value.response["Error"]["Code"] == "ValidationException"
