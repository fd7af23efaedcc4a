"""``uninstall`` with no state of the release on this machine (another MLRECIPE_HOME, a KFP task's pod made it):
the release's SageMaker resources are found by their release and namespace tags and removed, so no endpoint
outlives its release. Against a real moto server through the CLI (moto ends every training job Completed at once,
so stopping a running job is shown with botocore's Stubber), and the Stubber for the calls' exact order."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.sagemaker import tagged
from mlrecipe.errors import UserError
from tests.integration.helpers import cli
from tests.sagemaker.moto_server import ROLE, Moto, moto_server  # noqa: F401
from tests.sagemaker.stubs import ACCOUNT, NOW, REGION, stubbed

PIPELINE = """
    release: {release}
    steps:
      - name: train
        chart: training/pytorchjob-distributed
        backend: sagemaker
        values:
          image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu
          resources: {{nnodes: 1, node_type: ml.m5.xlarge}}
          pvc: []
          train:
            command: [python3, train.py]
      - name: endpoint
        chart: serving/sagemaker-endpoint
        backend: sagemaker
        values:
          image: 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.5-cpu-py311
          resources: {{node_type: ml.m5.large, nnodes: 1}}
          sagemaker: {{model_from: train}}
    """


def _names(sm: object, method: str, key: str, field: str) -> set[str]:
    return {item[field] for item in getattr(sm, method)()[key]}


@pytest.mark.integration
def test_uninstall_from_another_home_deletes_the_endpoint(tmp_path: Path, mlhome: Path,
                                                          moto_server: Moto) -> None:  # noqa: F811
    moto_server.configure(mlhome)
    for release in ("hyb", "hyb-keep"):  # "hyb" is a prefix of the other release's names: tags tell them apart
        pipeline = tmp_path / f"{release}.yaml"
        pipeline.write_text(textwrap.dedent(PIPELINE.format(release=release)))
        run = cli(mlhome, "run", str(pipeline), timeout=180)
        assert run.returncode == 0, run.stdout + run.stderr
    sm = moto_server.client("sagemaker")
    endpoints = _names(sm, "list_endpoints", "Endpoints", "EndpointName")
    assert len(endpoints) == 2
    keep = next(n for n in endpoints if n.startswith("hyb-keep-"))

    rerun = cli(moto_server.configure(tmp_path / "other-home"), "run", str(tmp_path / "hyb.yaml"), timeout=180)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr  # another home's re-run adopts, by tags and names
    assert "adopted: an earlier run of this plan created the job" in rerun.stdout, rerun.stdout
    assert len(sm.list_training_jobs()["TrainingJobSummaries"]) == 2
    assert _names(sm, "list_endpoints", "Endpoints", "EndpointName") == endpoints

    fresh = moto_server.configure(tmp_path / "fresh-home")  # no state of either release here
    gone = cli(fresh, "uninstall", "sagemaker://default/hyb")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    deleted = (endpoints - {keep}).pop()
    assert f"sagemaker: deleted endpoint, endpoint config, model {deleted}" in gone.stdout
    assert "uninstalled (found by its tags)" in gone.stdout
    assert _names(sm, "list_endpoints", "Endpoints", "EndpointName") == {keep}
    assert _names(sm, "list_endpoint_configs", "EndpointConfigs", "EndpointConfigName") == {keep}
    assert _names(sm, "list_models", "Models", "ModelName") == {keep}

    again = cli(fresh, "uninstall", "hyb", "--backend", "sagemaker")
    assert again.returncode == 0 and "nothing on sagemaker tagged with it" in again.stdout, again.stdout
    bare = cli(fresh, "uninstall", "hyb-keep")  # no backend named: nothing is asked of SageMaker
    assert bare.returncode == 0 and "not found; nothing to do" in bare.stdout
    assert _names(sm, "list_endpoints", "Endpoints", "EndpointName") == {keep}

    other = cli(fresh, "uninstall", "hyb-keep", "--backend", "sagemaker")  # no namespace: the one it is in
    assert other.returncode == 0, other.stdout + other.stderr
    assert _names(sm, "list_endpoints", "Endpoints", "EndpointName") == set()
    assert _names(sm, "list_models", "Models", "ModelName") == set()
    # (moto has no StopTrainingJob: uninstall from the state's home, which stops the recorded jobs, cannot run here)


@pytest.mark.integration
def test_unreachable_api_keeps_nothing_quiet(tmp_path: Path, mlhome: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sagemaker:\n  endpoint_url: http://127.0.0.1:9\n  region: us-east-1\n")
    result = cli(home, "uninstall", "sagemaker://default/hyb", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "could not be looked up by their tags" in result.stderr and "Traceback" not in result.stderr


def _arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:{kind}/{name}"


def _script(stub, jobs: list[tuple[str, str, str]], endpoints: list[tuple[str, str]]) -> None:
    """ListX answers and each resource's tags: jobs (name, status, namespace); endpoints (name, namespace), each
    with its config and model of the same name."""
    query = {"NameContains": "cnn", "MaxResults": 100}
    stub.add_response("list_training_jobs", {"TrainingJobSummaries": [
        {"TrainingJobName": n, "TrainingJobArn": _arn("training-job", n), "CreationTime": NOW,
         "TrainingJobStatus": s} for n, s, _ in jobs]}, query)
    for n, _, ns in jobs:
        stub.add_response("list_tags", {"Tags": [{"Key": "mlrecipe:release", "Value": "cnn"},
                                                 {"Key": "mlrecipe:namespace", "Value": ns}]},
                          {"ResourceArn": _arn("training-job", n)})
    for kind, method, key, field in (("endpoint", "list_endpoints", "Endpoints", "Endpoint"),
                                     ("endpoint-config", "list_endpoint_configs", "EndpointConfigs", "EndpointConfig"),
                                     ("model", "list_models", "Models", "Model")):
        extra = {"EndpointStatus": "InService", "LastModifiedTime": NOW} if kind == "endpoint" else {}
        stub.add_response(method, {key: [{f"{field}Name": n, f"{field}Arn": _arn(kind, n), "CreationTime": NOW,
                                          **extra} for n, _ in endpoints]}, query)
        for n, ns in endpoints:
            stub.add_response("list_tags", {"Tags": [{"Key": "mlrecipe:release", "Value": "cnn"},
                                                     {"Key": "mlrecipe:namespace", "Value": ns}]},
                              {"ResourceArn": _arn(kind, n)})


def test_running_jobs_stopped_and_endpoints_deleted_in_order() -> None:
    sm, stub = stubbed("sagemaker")
    _script(stub, [("cnn-train-1a2b3c4d-2", "InProgress", "default"), ("cnn-train-1a2b3c4d-1", "Failed", "default"),
                   ("cnn-train-99999999-1", "InProgress", "other")], [("cnn-endpoint-5e6f7a8b", "default")])
    stub.add_response("stop_training_job", {}, {"TrainingJobName": "cnn-train-1a2b3c4d-2"})
    stub.add_response("delete_endpoint", {}, {"EndpointName": "cnn-endpoint-5e6f7a8b"})
    stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": "cnn-endpoint-5e6f7a8b"})
    stub.add_response("delete_model", {}, {"ModelName": "cnn-endpoint-5e6f7a8b"})
    with stub:
        done = tagged.remove_release(sm, "cnn", "default")
        stub.assert_no_pending_responses()
    assert done == ["stopped training job cnn-train-1a2b3c4d-2",
                    "deleted endpoint, endpoint config, model cnn-endpoint-5e6f7a8b"]


def test_a_release_in_two_namespaces_needs_the_full_address() -> None:
    sm, stub = stubbed("sagemaker")
    _script(stub, [("cnn-train-1a2b3c4d-1", "InProgress", "default"), ("cnn-train-99999999-1", "InProgress", "dev")],
            [])
    with stub, pytest.raises(UserError, match=r"several namespaces \(sagemaker://default/cnn, sagemaker://dev/cnn\)"):
        tagged.remove_release(sm, "cnn", None)


def test_local_mode_finds_a_model_and_config_left_without_their_endpoint(tmp_path: Path) -> None:
    from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient

    client = LocalSageMakerClient(tmp_path / "sagemaker-local")
    for release, name in (("cnn", "cnn-endpoint-5e6f7a8b"), ("cnn-x", "cnn-x-endpoint-0a1b2c3d")):
        tags = [{"Key": "mlrecipe:release", "Value": release}, {"Key": "mlrecipe:namespace", "Value": "default"}]
        client.create_model(ModelName=name, ExecutionRoleArn=ROLE, Tags=tags,
                            PrimaryContainer={"Image": "img", "ModelDataUrl": "file:///tmp/model"})
        client.create_endpoint_config(EndpointConfigName=name, Tags=tags, ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1,
             "InstanceType": "ml.m5.large"}])
    # a CLI lost between CreateEndpointConfig and CreateEndpoint: no endpoint, yet its model and config go
    assert tagged.remove_release(client, "cnn", None) == ["deleted endpoint config, model cnn-endpoint-5e6f7a8b"]
    assert [m["ModelName"] for m in client.list_models()["Models"]] == ["cnn-x-endpoint-0a1b2c3d"]
    assert [c["EndpointConfigName"] for c in client.list_endpoint_configs()["EndpointConfigs"]] == [
        "cnn-x-endpoint-0a1b2c3d"]
    assert tagged.remove_release(client, "cnn", "default") == []


@pytest.mark.integration
def test_no_region_is_an_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    result = cli(home, "uninstall", "sagemaker://default/hyb", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no SageMaker client" in result.stderr and "Traceback" not in result.stderr
