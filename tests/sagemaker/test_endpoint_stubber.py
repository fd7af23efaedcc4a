"""A serving/sagemaker-endpoint step in mode aws against botocore's Stubber: the three create calls with the
requests the recipe maps to, Creating -> InService (serving, the runtime's invoke URL), Failed with its reason, a
live endpoint of the same plan adopted (nothing created twice), and cancel / uninstall deleting all three. Every
scripted call must be made; an unscripted one fails the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.base import ReleaseContext, StepState
from mlrecipe.backends.sagemaker.backend import HANDLE_FILE, SageMakerBackend
from mlrecipe.backends.sagemaker.endpoint import EndpointPlan, artifacts_var
from mlrecipe.backends.sagemaker.handle import EndpointHandle
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.errors import SpecError
from mlrecipe.spec.load import load_step_release
from tests.sagemaker.stubs import ACCOUNT, NOW, OPTIONS, REGION, stubbed

ARTIFACTS = "s3://my-bucket/mlrecipe/default/hyb/train/output/model.tar.gz"
IMAGE = f"763104351884.dkr.ecr.{REGION}.amazonaws.com/pytorch-inference:2.5-cpu-py311"
RECIPE = f"""
image: {IMAGE}
resources: {{node_type: ml.c5.large, nnodes: 2}}
sagemaker: {{model_from: train}}
server:
  env: [{{name: SAGEMAKER_PROGRAM, value: inference.py}}]
"""


class Endpoint:
    """A stubbed sagemaker client and the plan of an endpoint step that serves step ``train``'s model."""

    def __init__(self, tmp_path: Path, recipe: str = RECIPE, env: dict[str, str] | None = None) -> None:
        self.sm, self.stub = stubbed("sagemaker")
        self.stub.activate()
        self.backend = SageMakerBackend(SageMakerOptions.model_validate(OPTIONS), clients={"sagemaker": self.sm})
        path = tmp_path / "endpoint.yaml"
        path.write_text(recipe)
        self.step = load_step_release("hyb", "serving/sagemaker-endpoint", [str(path)], [], "default").steps[0]
        self.ctx = ReleaseContext("hyb", "default", "sagemaker", tmp_path / "release")
        plan = self.backend.plan(self.step, self.ctx, {artifacts_var("train"): ARTIFACTS} if env is None else env)
        assert isinstance(plan, EndpointPlan)
        self.plan = plan
        self.name = plan.endpoint_name

    def arn(self, kind: str) -> str:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:{kind}/{self.name.lower()}"

    def expect_describe(self, status: str | None, **extra: Any) -> None:
        if status is None:
            self.stub.add_client_error("describe_endpoint", "ValidationException",
                                       f'Could not find endpoint "{self.arn("endpoint")}".', 400,
                                       expected_params={"EndpointName": self.name})
            return
        answer = {"EndpointName": self.name, "EndpointArn": self.arn("endpoint"), "EndpointConfigName": self.name,
                  "EndpointStatus": status, "CreationTime": NOW, "LastModifiedTime": NOW, **extra}
        self.stub.add_response("describe_endpoint", answer, {"EndpointName": self.name})

    def expect_creates(self) -> None:
        self.stub.add_response("create_model", {"ModelArn": self.arn("model")}, self.plan.requests["create_model"])
        self.stub.add_response("create_endpoint_config", {"EndpointConfigArn": self.arn("endpoint-config")},
                               self.plan.requests["create_endpoint_config"])
        self.stub.add_response("create_endpoint", {"EndpointArn": self.arn("endpoint")},
                               self.plan.requests["create_endpoint"])

    def expect_deletes(self, gone: tuple[str, ...] = ()) -> None:
        for call, key in (("delete_endpoint", "EndpointName"), ("delete_endpoint_config", "EndpointConfigName"),
                          ("delete_model", "ModelName")):
            if call in gone:
                self.stub.add_client_error(call, "ValidationException", "Could not find it.", 400,
                                           expected_params={key: self.name})
            else:
                self.stub.add_response(call, {}, {key: self.name})


def test_requests_map_the_recipe(tmp_path: Path, mlhome: Path) -> None:
    ep = Endpoint(tmp_path)
    model = ep.plan.requests["create_model"]
    assert model["PrimaryContainer"] == {"Image": IMAGE, "ModelDataUrl": ARTIFACTS,
                                         "Environment": {"SAGEMAKER_PROGRAM": "inference.py"}}
    assert model["ExecutionRoleArn"] == OPTIONS["role_arn"]
    variant = ep.plan.requests["create_endpoint_config"]["ProductionVariants"][0]
    assert variant == {"VariantName": "AllTraffic", "ModelName": ep.name, "InitialInstanceCount": 2,
                       "InstanceType": "ml.c5.large"}
    assert ep.plan.requests["create_endpoint"]["EndpointConfigName"] == ep.name and len(ep.name) <= 63
    tags = {t["Key"]: t["Value"] for t in model["Tags"]}
    assert tags["mlrecipe:release"] == "hyb" and tags["mlrecipe:step"] == ep.step.name
    assert ep.plan.server_url == f"https://runtime.sagemaker.{REGION}.amazonaws.com/endpoints/{ep.name}"
    assert "create_endpoint_config" in ep.plan.materialize()


def test_creating_then_in_service_is_serving_with_the_invoke_url(tmp_path: Path, mlhome: Path) -> None:
    ep = Endpoint(tmp_path)
    ep.expect_describe(None)
    ep.expect_creates()
    running = ep.backend.submit(ep.plan, ep.ctx)
    assert not running.handle.adopted
    ep.expect_describe("Creating")
    assert running.settled() is None and running.progress_note() == "endpoint Creating"
    ep.expect_describe("InService")
    outcome = running.settled()
    assert outcome is not None and outcome.state is StepState.SERVING
    assert outcome.url == f"https://runtime.sagemaker.{REGION}.amazonaws.com/endpoints/{ep.name}"
    saved = EndpointHandle.model_validate_json((ep.plan.step_dir / HANDLE_FILE).read_text())
    assert saved.endpoint_name == ep.name
    ep.expect_deletes()  # uninstall, from the saved handle: no endpoint outlives its release
    ep.backend.cancel_handle(saved)
    ep.stub.assert_no_pending_responses()


def test_failed_endpoint_ends_the_step_with_the_reason(tmp_path: Path, mlhome: Path) -> None:
    ep = Endpoint(tmp_path)
    ep.expect_describe(None)
    ep.expect_creates()
    running = ep.backend.submit(ep.plan, ep.ctx)
    ep.expect_describe("Failed", FailureReason="The primary container for production variant AllTraffic did not "
                       "pass the ping health check.")
    outcome = running.settled()
    assert outcome is not None and outcome.state is StepState.FAILED
    assert "is Failed: The primary container for production variant AllTraffic did not pass" in outcome.message
    ep.expect_deletes(gone=("delete_model",))  # Ctrl-C / a failed release: what is already gone is fine
    running.cancel()
    ep.stub.assert_no_pending_responses()


def test_a_live_endpoint_of_the_same_plan_is_adopted(tmp_path: Path, mlhome: Path) -> None:
    ep = Endpoint(tmp_path)
    ep.expect_describe("InService")  # a re-run or resume: no create call is scripted, so none may be made
    running = ep.backend.submit(ep.plan, ep.ctx)
    assert running.handle.adopted
    ep.expect_describe("InService")
    outcome = running.settled()
    assert outcome is not None and outcome.state is StepState.SERVING
    ep.stub.assert_no_pending_responses()


def test_no_model_and_bad_values_are_refused_before_anything_is_created(tmp_path: Path, mlhome: Path) -> None:
    ep = Endpoint(tmp_path, env={})  # a dry run: the training step has not run yet
    assert ep.plan.requests["create_model"]["PrimaryContainer"]["ModelDataUrl"] == "$" + artifacts_var("train")
    with pytest.raises(Exception, match="no model archive"):
        ep.backend.submit(ep.plan, ep.ctx)  # no call scripted: none was made
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(SpecError) as err:
        Endpoint(bad, RECIPE.replace("ml.c5.large", "ml.q9.huge").replace("model_from: train", "inputs: []"))
    text = str(err.value)
    assert "endpoint.yaml:3: resources.node_type: CreateEndpointConfig" in text and "ml.q9.huge" in text
    assert "sagemaker.model_from" in text


def test_other_backends_refuse_the_chart(tmp_path: Path, mlhome: Path) -> None:
    from mlrecipe.backends.registry import get_backend

    step = Endpoint(tmp_path).step
    for name in ("local", "kubernetes", "slurm"):
        assert get_backend(name).check(step) == [
            f"chart serving/sagemaker-endpoint (endpoint) is not supported on backend {name}"]
