"""Issue 41 on the SageMaker backend, planned in-process (no AWS, no job): credentials by the one rule in Environment
and Tags (R3), a missing region and a malformed endpoint URL (R5), SageMaker's list limits and channel names (R6),
traversal in path-like options and in the local mode's staging (R7). Each bad input is exit 2 with ``error:`` lines
and nothing written under ``MLRECIPE_HOME``; no credential is echoed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from typer.testing import CliRunner

from mlrecipe.backends.sagemaker.client import aws_client
from mlrecipe.backends.sagemaker.local.channels import StagingError, file_system_mounts, stage_channels
from mlrecipe.cli.app import app
from mlrecipe.errors import BackendError

CHART = "training/pytorchjob-distributed"
LOCAL = ["-b", "sagemaker", "-B", "mode=local"]
AWS = ["-b", "sagemaker", "-B", "role_arn=arn:aws:iam::123456789012:role/x", "-B", "s3_prefix=s3://b/p",
       "--set", "image=123456789012.dkr.ecr.us-west-2.amazonaws.com/x:1"]


def _recipe(tmp_path: Path, **extra: Any) -> Path:
    values = {"image": "python:3.11", "pvc": [], "train": {"command": ["python3", "-c", "print(1)"]}, **extra}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    return path


def _template(recipe: Path, *args: str) -> Any:
    return CliRunner().invoke(app, ["template", "rel", CHART, "-f", str(recipe), *args])


def _refused(result: Any, mlhome: Path, *wanted: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for text in wanted:
        assert text in result.output, result.output
    assert not mlhome.exists() or not any(mlhome.rglob("*.json")), list(mlhome.rglob("*"))
    return str(result.output)


@pytest.mark.parametrize("name", ["PGPASSWORD", "MYSQL_PWD", "KAGGLE_KEY", "SECRETS", "AZURE_STORAGE_CONNECTION_STRING",
                                  "SLACK_WEBHOOK_URL"])
def test_credential_env_is_refused_in_the_training_job(tmp_path: Path, mlhome: Path, name: str) -> None:
    recipe = _recipe(tmp_path, train={"env": [{"name": name, "value": "v4lue-0f-secret"}],
                                      "command": ["python3", "-c", "print(1)"]})
    out = _refused(_template(recipe, *LOCAL), mlhome, f"train.env[0].value: {name} looks like a credential")
    assert "v4lue-0f-secret" not in out


def test_a_password_in_a_url_is_refused_whatever_the_name(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, train={"env": [{"name": "DATABASE_URL", "value": "postgres://ml:pw-123@db/x"}],
                                      "command": ["python3"]})
    out = _refused(_template(recipe, *LOCAL), mlhome, "DATABASE_URL looks like a credential")
    assert "pw-123" not in out
    plain = _recipe(tmp_path, train={"env": [{"name": "DATABASE_URL", "value": "postgres://ml@db/x"}],
                                     "command": ["python3"]})
    assert _template(plain, *LOCAL).exit_code == 0


@pytest.mark.parametrize(("tag", "said"), [("HF_TOKEN=hf_abcdefghij", "tag HF_TOKEN looks like a credential"),
                                           ("team=postgres://u:pw@db/x", "tags holds a credential"),
                                           ("ROUTER_KEY=x", "MLRECIPE_PLAIN_NAMES=ROUTER_KEY"),
                                           ("mlrecipe:release=x", "reserved")])
def test_credential_tags_are_refused(tmp_path: Path, mlhome: Path, tag: str, said: str) -> None:
    out = _refused(_template(_recipe(tmp_path), *LOCAL, "-B", f"tags.{tag}"), mlhome, "--backend-opt: tags")
    assert "hf_abcdefghij" not in out and "pw@" not in out
    if "holds" not in said:
        assert said in out


def test_a_plain_declared_ambiguous_tag_is_written(tmp_path: Path, mlhome: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLRECIPE_PLAIN_NAMES", "ROUTER_KEY")
    result = _template(_recipe(tmp_path), *LOCAL, "-B", "tags.ROUTER_KEY=blue")
    assert result.exit_code == 0, result.output
    assert "Key: ROUTER_KEY" in result.output


def test_mode_aws_without_a_region_is_one_error(tmp_path: Path, mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    _refused(_template(_recipe(tmp_path), *AWS), mlhome, "region: mode aws needs an AWS region",
             "-B sagemaker.region=")
    assert _template(_recipe(tmp_path), *AWS, "-B", "region=us-west-2").exit_code == 0


@pytest.mark.parametrize("url", ["htp:/bad", "http://exa mple", "http://host:99999", "ftp://host",
                                 "http://user:pw@host:9000"])
def test_a_malformed_endpoint_url_is_one_error(tmp_path: Path, mlhome: Path, url: str) -> None:
    out = _refused(_template(_recipe(tmp_path), *LOCAL, "-B", f"endpoint_url={url}"), mlhome,
                   "--backend-opt: endpoint_url:")
    assert "pw@" not in out


def test_a_client_that_cannot_be_made_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="no SageMaker client"):
        aws_client("sagemaker", "us-west-2", "htp:/bad")


def test_more_channels_than_sagemaker_allows_is_refused(tmp_path: Path, mlhome: Path) -> None:
    inputs = [{"name": f"c{i}", "uri": f"file:///data/c{i}"} for i in range(20)]
    recipe = _recipe(tmp_path, sagemaker={"inputs": inputs})
    _refused(_template(recipe, *LOCAL), mlhome, "sagemaker.inputs: at most 20 items (SageMaker's limit), got 21")
    assert _template(_recipe(tmp_path, sagemaker={"inputs": inputs[:19]}), *LOCAL).exit_code == 0


def test_more_tags_than_sagemaker_allows_is_refused(tmp_path: Path, mlhome: Path) -> None:
    tags = [arg for i in range(46) for arg in ("-B", f"tags.t{i}=v")]  # and mlrecipe's 5
    _refused(_template(_recipe(tmp_path), *LOCAL, *tags), mlhome, "tags: at most 50 items (SageMaker's limit), got 51")
    assert _template(_recipe(tmp_path), *LOCAL, *tags[2:]).exit_code == 0


@pytest.mark.parametrize(("names", "said"), [
    (["a", "a"], "sagemaker.inputs[1].name: channel a is given twice"),
    (["mlrecipe"], "sagemaker.inputs[0].name: the channel name mlrecipe is mlrecipe's own"),
    ([".."], "sagemaker.inputs[0].name: channel name '..' is a directory"),
])
def test_bad_channel_names_are_refused_at_the_recipe_line(tmp_path: Path, mlhome: Path, names: list[str],
                                                          said: str) -> None:
    recipe = _recipe(tmp_path, sagemaker={"inputs": [{"name": n, "uri": "file:///data/x"} for n in names]})
    _refused(_template(recipe, *LOCAL), mlhome, f"{recipe}:", said)


@pytest.mark.parametrize("option", [
    "file_systems.pv-fsx.directory_path=/../../x", "file_systems.pv-fsx.directory_path=/a/../..",
    "s3_prefix=s3://b/../p", "local_root=/srv/../../etc", "volume_root=../x"])
def test_traversal_in_path_options_is_refused(tmp_path: Path, mlhome: Path, option: str) -> None:
    args = ["-B", "file_systems.pv-fsx.id=fs-0123456789abcdef0"] if "file_systems" in option else []
    _refused(_template(_recipe(tmp_path), *LOCAL, *args, "-B", option), mlhome, "must not go up with '..'")


def test_local_staging_never_leaves_its_directories(tmp_path: Path) -> None:
    root = tmp_path / "file-systems"
    channel = {"ChannelName": "fsx", "DataSource": {"FileSystemDataSource": {
        "FileSystemId": "fs-0123456789abcdef0", "DirectoryPath": "/../../escaped"}}}
    with pytest.raises(StagingError, match="leaves its directory"):
        file_system_mounts([channel], root)
    assert not (tmp_path / "escaped").exists()

    class Listing:
        def get_paginator(self, _name: str) -> Any:
            return self

        def paginate(self, **_kw: Any) -> list[dict[str, Any]]:
            return [{"Contents": [{"Key": "p/../../../escaped-too"}]}]

        def download_file(self, *_args: Any) -> None:
            raise AssertionError("nothing is downloaded outside the channel")

    s3 = {"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/p/"}}}
    with pytest.raises(StagingError, match="leaves its directory"):
        stage_channels([s3], [tmp_path / "host-1"], lambda: Listing())


@pytest.mark.parametrize(("uri", "host"), [("file://anyhost/etc/hostname", "anyhost"), ("file://data/x", "data")])
def test_a_file_uri_with_a_host_is_refused(tmp_path: Path, mlhome: Path, uri: str, host: str) -> None:
    recipe = _recipe(tmp_path, sagemaker={"inputs": [{"name": "train", "uri": uri}]})
    _refused(_template(recipe, *LOCAL), mlhome, f"sagemaker.inputs[0].uri: '{uri}': a file:// URI names this "
             f"machine's files, not host '{host}'", f"file:///{uri[7:]}")
    with pytest.raises(StagingError, match="names this machine's files"):
        stage_channels([{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": uri}}}],
                       [tmp_path / "host-1"], None)


def test_a_file_uri_of_localhost_is_this_machine(tmp_path: Path, mlhome: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("x", encoding="utf-8")
    for uri in (f"file://localhost{data}", f"file://{data}"):
        recipe = _recipe(tmp_path, sagemaker={"inputs": [{"name": "train", "uri": uri}]})
        assert _template(recipe, *LOCAL).exit_code == 0
    stage_channels([{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": f"file://localhost{data}"}}}],
                   [tmp_path / "host-1"], None)
    assert (tmp_path / "host-1" / "input" / "data" / "train" / "x.txt").read_text(encoding="utf-8") == "x"


@pytest.mark.parametrize(("node_type", "image", "warned"), [
    ("p4de.24xlarge", "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5-cpu-py311-ubuntu22.04", True),
    ("g5.xlarge", "my-registry/trainer:cpu", True),
    ("p4de.24xlarge", "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5-gpu-py311-cu124", False),
    ("c5.xlarge", "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5-cpu-py311-ubuntu22.04", False),
])
def test_a_gpu_instance_with_a_cpu_image_is_a_warning_in_the_plan(tmp_path: Path, mlhome: Path, node_type: str,
                                                                  image: str, warned: bool) -> None:
    recipe = _recipe(tmp_path, image=image, resources={"node_type": node_type})
    result = _template(recipe, *LOCAL)
    assert result.exit_code == 0, result.output
    line = f"# warning: instance type ml.{node_type} has GPUs, but image {image} is a CPU image"
    assert (line in result.output) is warned, result.output[:2000]


def test_a_pvc_named_like_a_directory_is_refused_at_its_line(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, pvc=[{"name": "..", "mount_path": "/x"}])
    _refused(_template(recipe, *LOCAL), mlhome, f"{recipe}:3: pvc[0].name: String should match pattern")
