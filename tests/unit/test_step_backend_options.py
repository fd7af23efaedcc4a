"""``-B <backend>.key=value``: the command line's options of a step's own backend in a hybrid pipeline (the
release's backend keeps its plain keys), split by :func:`split_options`, applied by ``StepBackends.named`` and
through the CLI (``run --dry-run`` prints the plan the options made)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.options import CLI_SOURCE
from mlrecipe.backends.registry import get_backend
from mlrecipe.errors import SpecError, SpecIssue
from mlrecipe.runner.step_backends import StepBackends, hint_other_backends, split_options
from mlrecipe.spec.load import load_pipeline
from tests.integration.helpers import cli

PIPELINE = """\
release: hyb
steps:
  - name: data
    chart: data-prep/data-process
    values:
      pvc: []
      process: {command: [echo, hi]}
  - name: train
    chart: training/pytorchjob-distributed
    backend: sagemaker
    values:
      image: pytorch-training:2.5-cpu
      resources: {nnodes: 2}
      pvc: []
      train: {command: [python3, -c, "print(1)"]}
"""
LOCAL_ROLE = "arn:aws:iam::000000000000:role/mlrecipe-local"  # what mode local puts in the request


def test_split_by_backend_name() -> None:
    own, others = split_options("local", {"cpus": 2, "sagemaker": {"mode": "local", "tags": {"a": "b"}},
                                          "local": {"master_port": 29600}, "slurm": {"partition": "gpu"}})
    assert own == {"cpus": 2, "master_port": 29600}  # local.<key> is the release's own
    assert others == {"sagemaker": {"mode": "local", "tags": {"a": "b"}}, "slurm": {"partition": "gpu"}}


def test_a_backend_name_that_is_no_mapping_stays_a_plain_key() -> None:
    own, others = split_options("local", {"sagemaker": "x"})
    assert own == {"sagemaker": "x"} and others == {}  # then refused as an unknown option of local


def test_an_unknown_option_of_the_release_backend_names_the_backends_that_have_it() -> None:
    unknown = SpecError([SpecIssue(CLI_SOURCE, None, "role_arn", "unknown option 'role_arn'"),
                         SpecIssue(CLI_SOURCE, None, "colour", "unknown option 'colour'")])
    issues = hint_other_backends(unknown, "local").issues
    assert issues[0].message.endswith("an option of a step's backend is spelled -B sagemaker.role_arn=...")
    assert issues[1].message == "unknown option 'colour'"  # no backend has it


def test_named_backend_takes_its_options(mlhome: Path) -> None:
    backends = StepBackends(get_backend("local"), {"sagemaker": {"mode": "local", "max_run": 60}})
    sagemaker = backends.named("sagemaker")
    assert sagemaker.options.mode == "local" and sagemaker.options.max_run == 60
    assert backends.named("sagemaker") is sagemaker and backends.named(None) is backends.default


def test_a_bad_option_of_another_backend_is_named_with_its_prefix(mlhome: Path) -> None:
    with pytest.raises(SpecError) as err:  # made at once, even though no step asked for it yet
        StepBackends(get_backend("local"), {"sagemaker": {"mode": "cloud", "colour": "red"}})
    text = str(err.value)
    assert "--backend-opt: sagemaker.mode:" in text and "sagemaker.colour: unknown option 'colour'" in text


@pytest.mark.integration
def test_cli_sets_the_step_backend_mode(mlhome: Path, tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE)
    local = cli(mlhome, "run", str(pipeline), "--dry-run", "-B", "sagemaker.mode=local", "-B", "local.cpus=1")
    assert local.returncode == 0, local.stderr
    assert f"RoleArn: {LOCAL_ROLE}" in local.stdout and "S3Uri: file://" in local.stdout
    aws = cli(mlhome, "run", str(pipeline), "--dry-run", "-B", "sagemaker.role_arn=arn:aws:iam::123456789012:role/r",
              "-B", "sagemaker.s3_prefix=s3://bucket/p", "-B", "sagemaker.region=us-west-2")
    assert aws.returncode == 0, aws.stderr
    assert LOCAL_ROLE not in aws.stdout and "RoleArn: arn:aws:iam::123456789012:role/r" in aws.stdout


@pytest.mark.integration
@pytest.mark.parametrize(("opt", "named"), [
    ("sagemaker.colour=red", "--backend-opt: sagemaker.colour: unknown option 'colour'"),
    ("colour=red", "--backend-opt: colour: unknown option 'colour'"),
    ("mode=local", "--backend-opt: mode: unknown option 'mode'"),  # plain keys stay the release's (local)
    ("local.colour=red", "--backend-opt: colour: unknown option 'colour'"),
])
def test_cli_unknown_option_is_exit_2_naming_it(mlhome: Path, tmp_path: Path, opt: str, named: str) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE)
    result = cli(mlhome, "run", str(pipeline), "-B", opt, timeout=60)
    assert result.returncode == 2 and named in result.stderr, result.stderr
    assert not (mlhome / "releases").exists()  # nothing started or written


def test_set_moves_a_step_to_another_backend(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE)
    steps = {s.name: s for s in load_pipeline(pipeline, ["train.backend=local"]).steps}
    assert steps["train"].backend == "local" and steps["train"].backend_at == ("--set", None, "train.backend")
    assert load_pipeline(pipeline, ["train.backend=null"]).steps[1].backend is None  # the release's backend
    moved = load_pipeline(pipeline, ["data.backend=sagemaker", "data.resources.nnodes=2"]).steps[0]
    assert moved.backend == "sagemaker" and moved.recipe.resources.nnodes == 2
    with pytest.raises(SpecError, match=r"--set: train.backend: must be a backend name"):
        load_pipeline(pipeline, ["train.backend.x=1"])
