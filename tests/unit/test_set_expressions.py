"""``--set`` never drops anything silently (issue 29, point 5): an expression Helm's parser would swallow, one that
sets nothing, and a pipeline expression that names no step are exit 2 naming the expression (and the steps)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.errors import SpecError
from mlrecipe.spec.load import load_pipeline
from mlrecipe.spec.values import parse_sets

PIPELINE = """\
release: r
steps:
  - name: train
    chart: data-prep/data-process
    recipe: {process: {command: [python3, -c, "print(1)"]}}
  - name: evaluate
    chart: data-prep/data-process
    recipe: {process: {command: [python3, -c, "print(2)"]}}
"""


@pytest.mark.parametrize(
    "expressions,bad,message",
    [
        (["a[=1", "resources.nnodes=1"], "a[=1", "cannot parse: it swallows what follows it"),
        (["resources.nnodes=1,a[=1,image=x"], "resources.nnodes=1,a[=1,image=x", "it swallows what follows it"),
        (["resources.nnodes=1", "=2"], "=2", "sets nothing"),
        (["x["], "x[", "it swallows what follows it"),
        (["resources.nnodes"], "resources.nnodes", "cannot parse"),
    ],
)
def test_a_bad_expression_is_named_and_not_dropped(expressions: list[str], bad: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_sets(expressions)
    issue, = err.value.issues
    assert (issue.file, issue.path) == ("--set", bad)
    assert message in issue.message


def test_good_expressions_still_merge_as_helm_does() -> None:
    values = parse_sets(["env[0].name=A", "env[0].value=x\\,y", "resources.nnodes=2", "args={a,b}"])
    assert values == {"env": [{"name": "A", "value": "x,y"}], "resources": {"nnodes": 2}, "args": ["a", "b"]}


def test_unclosed_bracket_with_install_is_exit_2(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("process: {command: [python3]}\n")
    result = CliRunner().invoke(app, ["template", "rel", "data-prep/data-process", "-f", str(recipe),
                                      "--set", "a[=1", "--set", "resources.nnodes=0"])
    assert result.exit_code == 2, result.output
    assert "--set: a[=1: cannot parse" in result.output
    assert not (mlhome / "releases").exists()


@pytest.mark.parametrize(
    "expression,message",
    [
        ("trian.resources.nnodes=2", "no step 'trian' in this pipeline (did you mean 'train'?)"),
        ("TRAIN.resources.nnodes=2", "no step 'TRAIN' in this pipeline (did you mean 'train'?)"),
        ("resources.nnodes=2", "no step 'resources' in this pipeline: a pipeline's --set starts with a step name"),
        ("train=2", "sets step 'train' to a plain value"),
    ],
)
def test_pipeline_set_must_name_a_step(tmp_path: Path, mlhome: Path, expression: str, message: str) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE)
    with pytest.raises(SpecError) as err:
        load_pipeline(pipeline, ["evaluate.resources.nnodes=1", expression])
    issue, = err.value.issues
    assert (issue.file, issue.path) == ("--set", expression)
    assert message in issue.message
    if "no step" in message:
        assert issue.message.endswith("steps: train, evaluate")
    for verb in (["run", str(pipeline), "--set", expression], ["validate", str(pipeline), "--set", expression]):
        result = CliRunner().invoke(app, verb)
        if "No such option" in result.output:
            continue  # validate takes no --set
        assert result.exit_code == 2, result.output
        assert f"--set: {expression}: " in result.output, result.output
    assert not (mlhome / "releases").exists()


def test_pipeline_set_with_a_step_prefix_applies(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE)
    spec = load_pipeline(pipeline, ["train.resources.nnodes=2"])
    assert spec.step("train").recipe.resources.nnodes == 2
    assert spec.step("evaluate").recipe.resources.nnodes == 1


def test_a_bad_value_from_set_is_reported_at_set_not_at_the_file(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("resources:\n  nnodes: 2\nprocess:\n  command: [python3]\n")
    result = CliRunner().invoke(app, ["template", "rel", "data-prep/data-process", "-f", str(recipe),
                                      "--set", "resources.nnodes=0", "--set", "imagee=x"])
    assert result.exit_code == 2, result.output
    assert "error: --set: resources.nnodes: must be greater than or equal to 1, got 0" in result.output
    assert "error: --set: imagee: unknown key 'imagee'" in result.output
    assert f"{recipe}:" not in result.output


def test_a_bad_value_from_a_pipeline_set_names_the_step_path(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(PIPELINE)
    with pytest.raises(SpecError) as err:
        load_pipeline(pipeline, ["train.resources.nnodes=0", "evaluate.resources.nnodes=2"])
    issue, = err.value.issues
    assert (issue.file, issue.line, issue.path) == ("--set", None, "train.resources.nnodes")
