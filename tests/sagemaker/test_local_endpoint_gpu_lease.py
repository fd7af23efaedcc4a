"""A local-mode endpoint on a GPU instance type holds the machine-wide lease on the one GPU it gets while its server
runs: a second GPU endpoint gets the other GPU, a third finds every GPU held and fails naming the holders, and the
lease is free again once the endpoints are deleted. The GPUs are a fake ``nvidia-smi``'s (2); servers are real."""

from __future__ import annotations

import json
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlrecipe.backends.host.devices import visible_gpus
from mlrecipe.backends.host.gpu_lease import is_free
from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient
from tests.fake_gpus import install_fake_nvidia_smi
from tests.sagemaker.local_endpoints import model_archive, settled

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent
INFERENCE = textwrap.dedent('''
    import json, os
    def model_fn(model_dir):
        return os.environ["CUDA_VISIBLE_DEVICES"]
    def predict_fn(data, model):
        return model
    def output_fn(prediction, accept):
        return json.dumps({"gpus": prediction}), "application/json"
''')


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalSageMakerClient]:
    install_fake_nvidia_smi(tmp_path / "fakebin", 2)
    monkeypatch.setenv("PATH", f"{tmp_path / 'fakebin'}:{BIN}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    local = LocalSageMakerClient(tmp_path / "sm", python_bin_dir=BIN, gpu_lease_dir=tmp_path / "leases")
    yield local
    for endpoint in local.list_endpoints()["Endpoints"]:
        local.delete_endpoint(EndpointName=endpoint["EndpointName"])


def test_gpu_endpoints_lease_their_gpu_until_deleted(client: LocalSageMakerClient, tmp_path: Path) -> None:
    archive = model_archive(tmp_path / "m.tgz", {"code/inference.py": INFERENCE.encode()})
    client.create_model(ModelName="m", ExecutionRoleArn="arn:aws:iam::000000000000:role/local",
                        PrimaryContainer={"Image": "local/serve:latest", "ModelDataUrl": archive})
    client.create_endpoint_config(EndpointConfigName="c", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "m", "InitialInstanceCount": 1, "InstanceType": "ml.g5.xlarge"}])
    gpus = visible_gpus()
    assert len(gpus) == 2
    for name in ("first", "second", "third"):
        client.create_endpoint(EndpointName=name, EndpointConfigName="c")
    states = {n: settled(client, n) for n in ("first", "second", "third")}
    assert [states[n]["EndpointStatus"] for n in ("first", "second")] == ["InService", "InService"]
    assert states["third"]["EndpointStatus"] == "Failed"
    assert "every GPU of this machine is leased" in states["third"]["FailureReason"]
    assert "held by release sagemaker-local step first" in states["third"]["FailureReason"]
    served = set()
    for name in ("first", "second"):
        request = urllib.request.Request(f"{client.endpoint_url(name)}/invocations", data=b"{}",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            served.add(json.loads(response.read())["gpus"])
    assert served == {"0", "1"}, "each GPU endpoint's server sees its own leased GPU"
    assert not any(is_free(tmp_path / "leases", g) for g in gpus), "the servers hold the lease"
    client.delete_endpoint(EndpointName="first")
    assert is_free(tmp_path / "leases", gpus[0]) != is_free(tmp_path / "leases", gpus[1]), "one GPU is free again"
    client.delete_endpoint(EndpointName="second")
    assert all(is_free(tmp_path / "leases", g) for g in gpus)
