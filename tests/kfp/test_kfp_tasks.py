"""The tasks planned from a pipeline (no kfp needed): dependencies, retries, volumes, credentials kept out."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mlrecipe.errors import SpecError, UserError
from mlrecipe.kfp.step import install_argv, with_credentials
from mlrecipe.kfp.tasks import Volume, plan_pipeline
from mlrecipe.spec.load import load_pipeline
from tests.kfp.kfp_env import PIPELINES

SECRET_SET = "data.process.env[0].name=HF_TOKEN,data.process.env[0].value=hf_plan_secret_123"


def test_one_task_per_step_with_its_dependencies_retries_and_volumes() -> None:
    plan = plan_pipeline(load_pipeline(PIPELINES / "fanout.yaml", [SECRET_SET]))
    tasks = {t.name: t for t in plan.tasks}
    assert list(tasks) == ["data", "train-nnodes-1", "train-nnodes-2", "evaluate"]
    assert tasks["data"].depends_on == ()
    assert tasks["train-nnodes-1"].depends_on == tasks["train-nnodes-2"].depends_on == ("data",)
    assert tasks["evaluate"].depends_on == ("train-nnodes-1", "train-nnodes-2")
    assert [tasks[n].retries for n in tasks] == [0, 3, 3, 0]
    assert tasks["data"].volumes == (Volume("pv-fsx", "/fsx"), Volume("pv-efs", "/efs"))
    assert tasks["evaluate"].volumes == (Volume("pv-fsx", "/fsx"),)
    assert tasks["train-nnodes-2"].values["resources"]["nnodes"] == 2
    assert tasks["train-nnodes-2"].values["step_name"] == "train-nnodes-2"
    assert tasks["train-nnodes-1"].values["train"]["command"] == ["torchrun"]  # the launcher, expanded


def test_credentials_leave_only_their_names() -> None:
    plan = plan_pipeline(load_pipeline(PIPELINES / "fanout.yaml", [SECRET_SET]))
    data = plan.tasks[0]
    assert data.secret_env == ("HF_TOKEN",)
    assert data.values["process"]["env"] == [{"name": "HF_TOKEN"}]
    assert plan.secret_name == "kfp-golden-credentials" and plan.secret_keys == ("HF_TOKEN",)
    assert "hf_plan_secret_123" not in "".join(t.values_json for t in plan.tasks)


def test_steps_without_depends_on_run_in_file_order(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    steps = "".join(f"  - name: s{i}\n    chart: data-prep/data-process\n    values: {{process: {{command: [echo]}}}}\n"
                    for i in range(3))
    pipeline.write_text("release: chain\nsteps:\n" + steps)
    plan = plan_pipeline(load_pipeline(pipeline))
    assert [(t.name, t.depends_on) for t in plan.tasks] == [("s0", ()), ("s1", ("s0",)), ("s2", ("s1",))]


def test_one_credential_name_with_two_values_is_bad_input(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "release: two\nsteps:\n"
        "  - name: a\n    chart: data-prep/data-process\n    values:\n"
        "      process: {command: [echo], env: [{name: HF_TOKEN, value: hf_one}]}\n"
        "  - name: b\n    chart: data-prep/data-process\n    values:\n"
        "      process:\n        command: [echo]\n        env:\n          - {name: HF_TOKEN, value: hf_two}\n")
    with pytest.raises(SpecError) as err:
        plan_pipeline(load_pipeline(pipeline))
    (issue,) = err.value.issues
    assert (issue.file, issue.line, issue.path) == (str(pipeline), 13, "steps[1].values.process.env[0].value")
    assert "differs from its value in step a" in issue.message and "hf_" not in issue.message


def test_credentials_come_back_from_the_task_environment() -> None:
    values = {"process": {"env": [{"name": "HF_TOKEN"}, {"name": "MODE", "value": "x"}]}, "step_name": "s"}
    filled = with_credentials(values, ["HF_TOKEN"], {"HF_TOKEN": "hf_abc"})
    assert filled["process"]["env"] == [{"name": "HF_TOKEN", "value": "hf_abc"}, {"name": "MODE", "value": "x"}]
    assert values["process"]["env"][0] == {"name": "HF_TOKEN"}  # not modified in place
    with pytest.raises(UserError, match="HF_TOKEN"):
        with_credentials(values, ["HF_TOKEN"], {})


def test_install_command_line() -> None:
    argv = install_argv("rel", "ns", "data-prep/data-process", "/tmp/v.yaml", "local", "volumes=none")
    assert argv[1:] == ["-m", "mlrecipe", "install", "rel", "data-prep/data-process", "-f", "/tmp/v.yaml",
                        "--namespace", "ns", "--backend", "local", "--backend-opt", "volumes=none"]
    assert "--backend-opt" not in install_argv("rel", "ns", "c", "v", "kubernetes", "")
    assert json.loads(json.dumps(argv)) == argv


def test_sagemaker_steps_keep_their_backend_and_pass_typed_outputs() -> None:
    plan = plan_pipeline(load_pipeline(PIPELINES.parents[2] / "examples" / "sagemaker-hybrid" / "pipeline.yaml", []))
    tasks = {t.name: t for t in plan.tasks}
    assert [tasks[n].backend for n in tasks] == [None, "sagemaker", "sagemaker", None]
    assert tasks["train"].outputs == ("model_artifacts", "job_name")
    assert tasks["endpoint"].outputs == ("endpoint_name", "url")
    # the endpoint's recipe names sagemaker.model_from; the client's args read $MLRECIPE_ENDPOINT_URL and
    # $MLRECIPE_ENDPOINT_ENDPOINT_NAME (mode aws calls InvokeEndpoint by name)
    assert tasks["endpoint"].inputs == (("model_artifacts", "train"), ("job_name", "train"))
    assert tasks["client"].inputs == (("endpoint_name", "endpoint"), ("url", "endpoint")) and tasks["client"].typed
    assert tasks["data"].inputs == () and not tasks["data"].typed


def test_a_task_reads_typed_outputs_of_several_tasks(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(textwrap.dedent("""
        release: r
        steps:
          - {name: train, chart: training/pytorchjob-distributed, backend: sagemaker,
             values: {image: i, pvc: [], train: {command: [python3, t.py]}}}
          - {name: serve, chart: serving/sagemaker-endpoint, backend: sagemaker,
             values: {image: i, sagemaker: {model_from: train}}}
          - {name: use, chart: data-prep/data-process,
             values: {pvc: [], process: {command: [sh, -c, 'echo $MLRECIPE_SERVE_URL $MLRECIPE_TRAIN_JOB_NAME']}}}
        """))
    tasks = {t.name: t for t in plan_pipeline(load_pipeline(pipeline)).tasks}
    assert tasks["use"].inputs == (("job_name", "train"), ("url", "serve"))


def test_typed_inputs_become_the_step_variables_and_the_endpoint_model_data() -> None:
    from mlrecipe.kfp.step import inputs_env, with_model_data

    assert inputs_env("train", {"model_artifacts": "s3://b/m.tar.gz", "job_name": "j-1"}) == {
        "MLRECIPE_TRAIN_MODEL_ARTIFACTS": "s3://b/m.tar.gz", "MLRECIPE_TRAIN_JOB_NAME": "j-1"}
    values = {"sagemaker": {"model_from": "train"}}
    assert with_model_data(values, "train", "s3://b/m.tar.gz")["sagemaker"]["model_data"] == "s3://b/m.tar.gz"
    given = {"sagemaker": {"model_from": "train", "model_data": "s3://b/mine.tar.gz"}}
    assert with_model_data(given, "train", "s3://b/m.tar.gz") == given  # the recipe's own model_data wins


@pytest.mark.parametrize("opt", ["sagemaker.aws_secret_access_key=x", "aws_session_token=x",
                                 "sagemaker.endpoint_url=http://AKIAABCDEFGHIJKLMNOP@h", "region"])
def test_compile_refuses_credentials_in_sagemaker_options(opt: str) -> None:
    from mlrecipe.cli.compile_cmd import sagemaker_default

    with pytest.raises(UserError):
        sagemaker_default([opt])
    assert sagemaker_default(["sagemaker.region=us-west-2,mode=local"]) == "region=us-west-2,mode=local"
