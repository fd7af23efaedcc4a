"""A serving/sagemaker-endpoint step against a real moto server on 127.0.0.1 (the CLI's clients over real HTTP,
through ``endpoint_url``): CreateModel, CreateEndpointConfig, CreateEndpoint and their descriptions, then the
deletion of all three by ``cancel_handle`` (what ``uninstall`` calls). moto puts endpoints InService at once."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from botocore.exceptions import ClientError

from mlrecipe.backends.base import ReleaseContext, StepState
from mlrecipe.backends.sagemaker.backend import HANDLE_FILE, SageMakerBackend
from mlrecipe.backends.sagemaker.endpoint import artifacts_var
from mlrecipe.backends.sagemaker.handle import EndpointHandle
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.spec.load import load_step_release
from tests.sagemaker.moto_server import BUCKET, ROLE, Moto, moto_server  # noqa: F401

pytestmark = pytest.mark.integration
RECIPE = """
image: 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.5-cpu-py311
resources: {node_type: ml.m5.large, nnodes: 1}
sagemaker: {model_from: train}
"""


def test_create_describe_and_delete_the_three(tmp_path: Path, mlhome: Path, moto_server: Moto) -> None:  # noqa: F811
    options = SageMakerOptions(role_arn=ROLE, s3_prefix=f"s3://{BUCKET}/mlrecipe", region="us-east-1",
                               endpoint_url=moto_server.url, poll_seconds=0.01)
    backend = SageMakerBackend(options)
    recipe = tmp_path / "endpoint.yaml"
    recipe.write_text(RECIPE)
    step = load_step_release("hyb", "serving/sagemaker-endpoint", [str(recipe)], [], "default").steps[0]
    ctx = ReleaseContext("hyb", "default", "sagemaker", tmp_path / "release")
    artifacts = f"s3://{BUCKET}/mlrecipe/default/hyb/train/output/model.tar.gz"
    plan = backend.plan(step, ctx, {artifacts_var("train"): artifacts})
    running = backend.submit(plan, ctx)
    outcome = running.wait(0.01)
    assert outcome.state is StepState.SERVING
    assert outcome.url == f"https://runtime.sagemaker.us-east-1.amazonaws.com/endpoints/{plan.endpoint_name}"
    assert outcome.outputs == {"endpoint_name": plan.endpoint_name}  # later steps: MLRECIPE_<STEP>_ENDPOINT_NAME

    sm = moto_server.client("sagemaker")
    name = plan.endpoint_name
    model = sm.describe_model(ModelName=name)
    assert model["PrimaryContainer"]["ModelDataUrl"] == artifacts and model["ExecutionRoleArn"] == ROLE
    variant = sm.describe_endpoint_config(EndpointConfigName=name)["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.m5.large" and variant["ModelName"] == name
    assert sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "InService"

    again = backend.submit(backend.plan(step, ctx, {artifacts_var("train"): artifacts}), ctx)
    assert again.handle.adopted  # the same plan finds its endpoint: nothing is created twice
    assert len(sm.list_endpoints()["Endpoints"]) == 1

    handle = EndpointHandle.model_validate_json((plan.step_dir / HANDLE_FILE).read_text())
    backend.cancel_handle(handle)  # uninstall
    assert sm.list_endpoints()["Endpoints"] == []
    assert sm.list_endpoint_configs()["EndpointConfigs"] == [] and sm.list_models()["Models"] == []
    with pytest.raises(ClientError):
        sm.describe_endpoint(EndpointName=name)
    assert not backend.handle_alive(handle)
    backend.cancel_handle(handle)  # a second uninstall finds nothing and is fine
