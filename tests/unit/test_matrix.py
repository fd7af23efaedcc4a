"""Matrix steps (issue 17, point 2): expansion, names, dependencies, errors at the pipeline's lines, the ranking."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.backends.base import ReleaseContext, StepState
from mlrecipe.backends.registry import get_backend
from mlrecipe.cli.app import app
from mlrecipe.cli.sweep_table import render
from mlrecipe.errors import SpecError
from mlrecipe.runner.state import ReleaseRecord, StepRecord
from mlrecipe.runner.sweep import SweepRow, SweepTable, rank, sweep_tables, unreported_rank_metric
from mlrecipe.spec.load import ReleaseSpec, load_pipeline
from mlrecipe.spec.matrix import MAX_NAME, key_path

STEP = """\
  - name: {name}
    chart: data-prep/data-process
    values:
      pvc: []
      process: {{command: ["true"]}}
"""


def pipeline(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def steps_text(*names: str) -> str:
    return "".join(STEP.format(name=n) for n in names)


def load_error(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_pipeline(path)
    return [str(issue) for issue in info.value.issues]


def test_expands_to_one_step_per_combination_with_readable_names(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("train") + """\
    matrix:
      resources.nproc_per_node: [1, 2]
      resources.nnodes: [1, 2]
""")
    spec = load_pipeline(path)
    names = [s.name for s in spec.steps]
    assert names == ["train-nproc-per-node-1-nnodes-1", "train-nproc-per-node-1-nnodes-2",
                     "train-nproc-per-node-2-nnodes-1", "train-nproc-per-node-2-nnodes-2"]
    last = spec.steps[-1]
    assert last.values["resources"] == {"nproc_per_node": 2, "nnodes": 2}
    assert last.values["process"] == {"command": ["true"]}, "the step's own values are kept"
    assert last.matrix is not None and last.matrix.step == "train"
    assert last.matrix.as_dict() == {"resources.nproc_per_node": 2, "resources.nnodes": 2}
    assert len({s.content_hash for s in spec.steps}) == 4, "each combination is skipped or resumed on its own"
    assert all(v == frozenset() for v in spec.dependencies().values()), "a matrix step's expansions run side by side"


def test_names_fall_back_to_indexes_when_too_long_or_not_distinct(tmp_path: Path) -> None:
    long_name = "a" * 38
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text(long_name) + """\
    matrix:
      resources.nnodes: [1, 2, 3]
""" + steps_text("b") + """\
    matrix:
      process.args: [["x"], ["y"]]
""" + steps_text("c") + """\
    matrix:
      resources.node_type: ["g5.x", "g5-x"]
""")
    names = [s.name for s in load_pipeline(path).steps]
    assert names[:3] == [long_name + "-0", long_name + "-1", long_name + "-2"]
    assert all(len(n) <= MAX_NAME for n in names)
    assert names[3:] == ["b-0", "b-1", "c-0", "c-1"], "lists have no readable name; g5.x and g5-x would clash"


def test_dependents_wait_for_every_expansion(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("prep") + steps_text("train") + """\
    depends_on: prep
    matrix:
      resources.nnodes: [1, 2]
""" + steps_text("report") + "    depends_on: [train]\n")
    deps = load_pipeline(path).dependencies()
    assert deps["train-nnodes-1"] == deps["train-nnodes-2"] == frozenset({"prep"})
    assert deps["report"] == frozenset({"train-nnodes-1", "train-nnodes-2"})


def test_file_order_pipelines_keep_their_order_and_run_expansions_in_parallel(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("prep") + steps_text("train") + """\
    matrix:
      resources.nnodes: [1, 2, 3]
""" + steps_text("report") + steps_text("publish"))
    spec = load_pipeline(path)
    deps = spec.dependencies()
    assert [s.name for s in spec.steps] == ["prep", "train-nnodes-1", "train-nnodes-2", "train-nnodes-3",
                                            "report", "publish"]
    assert deps["prep"] == frozenset()
    assert {deps[f"train-nnodes-{n}"] for n in (1, 2, 3)} == {frozenset({"prep"})}
    assert deps["report"] == frozenset({"train-nnodes-1", "train-nnodes-2", "train-nnodes-3"})
    assert deps["publish"] == frozenset({"report"})


def test_a_pipeline_without_matrix_is_unchanged(tmp_path: Path) -> None:
    spec = load_pipeline(pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("a", "b")))
    assert [s.depends_on for s in spec.steps] == [(), ()] and all(s.matrix is None for s in spec.steps)
    assert spec.dependencies() == {"a": frozenset(), "b": frozenset({"a"})}


@pytest.mark.parametrize(("matrix", "expected"), [
    ("    matrix: {}\n", "pipeline.yaml:8: steps[0].matrix: an empty matrix"),
    ("    matrix:\n      resources.nnodes: []\n", "pipeline.yaml:9: steps[0].matrix.resources.nnodes: no values"),
    ("    matrix:\n      resources.nnodez: [1, 2]\n",
     "pipeline.yaml:9: steps[0].matrix.resources.nnodez: unknown key 'nnodez' (did you mean 'nnodes'?)"),
    ("    matrix:\n      imagee: [a]\n", "pipeline.yaml:9: steps[0].matrix.imagee: unknown key 'imagee'"),
    ("    matrix:\n      resources.nnodes:\n        - 1\n        - 0\n",
     "pipeline.yaml:9: steps[0].matrix.resources.nnodes: must be greater than or equal to 1, got 0"),
    ("    matrix:\n      elastic_policy.max_restarts: [1]\n",
     "pipeline.yaml:9: steps[0].matrix.elastic_policy: 'elastic_policy' is not used by chart data-prep/data-process"),
    ("    matrix:\n      env[0].value: [a]\n", "pipeline.yaml:9: steps[0].matrix.env[0].value: 'env[0].value' is not"),
    ("    matrix:\n      resources: [{nnodes: 1}]\n      resources.nnodes: [2]\n",
     "pipeline.yaml:10: steps[0].matrix.resources.nnodes: overlaps matrix key 'resources'"),
    ("    matrix:\n      resources.nnodes: 2\n",
     "pipeline.yaml:9: steps[0].matrix.resources.nnodes: must be a valid list"),
])
def test_bad_matrices_name_the_pipeline_line(tmp_path: Path, matrix: str, expected: str) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("train") + matrix)
    errors = load_error(path)
    assert any(e.startswith(str(tmp_path / expected.split(":")[0]) + ":") and expected.split(":", 1)[1] in e
               for e in errors), errors
    assert len(errors) == len(set(errors)) == 1, "one message, not one per combination"


def test_every_problem_of_a_matrix_at_once(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("train") + """\
    matrix:
      resources.nnodez: [1, 2]
      empty: []
""")
    errors = load_error(path)
    assert len(errors) == 2 and "pipeline.yaml:9: steps[0].matrix.resources.nnodez" in errors[1]


def test_a_cycle_through_a_matrix_step(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("train") + """\
    depends_on: report
    matrix:
      resources.nnodes: [1, 2]
""" + steps_text("report") + "    depends_on: [train]\n")
    (error,) = load_error(path)
    assert "pipeline.yaml:8: steps[0].depends_on: dependency cycle among steps: train -> report" in error


def test_an_expanded_name_that_another_step_has(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("train") + """\
    matrix:
      resources.nnodes: [1, 2]
""" + steps_text("train-nnodes-2"))
    (error,) = load_error(path)
    assert "pipeline.yaml:8: steps[0].matrix: expands to step 'train-nnodes-2', a name steps[1] already has" in error


def test_a_metric_to_rank_by_without_a_matrix(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsweep:\n  rank_by: eval_loss\nsteps:\n" + steps_text("train"))
    (error,) = load_error(path)
    assert "pipeline.yaml:3: sweep.rank_by: a metric to rank by, but no step has a matrix" in error


def test_bad_matrix_exits_2_through_the_cli(tmp_path: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("train") + "    matrix:\n      resources.x: [1]\n")
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 2
    assert "pipeline.yaml:9: steps[0].matrix.resources.x: unknown key 'x'" in result.output
    assert "nothing was started" in result.output


def test_key_paths() -> None:
    assert key_path("resources.nnodes") == ("resources", "nnodes")
    assert key_path(r"resources.requests.nvidia\.com/gpu") == ("resources", "requests", "nvidia.com/gpu")
    assert key_path("a..b") is None and key_path("env[0].value") is None and key_path("a=b") is None


def test_validate_and_dry_run_show_the_expanded_steps(tmp_path: Path, mlhome: Path) -> None:
    path = pipeline(tmp_path, "release: r\nsteps:\n" + steps_text("train") + """\
    matrix:
      resources.nnodes: [1, 2]
""")
    result = CliRunner().invoke(app, ["validate", str(path), "-b", "local"])
    assert result.exit_code == 0, result.output
    assert "2 step(s): train-nnodes-1, train-nnodes-2" in result.output
    result = CliRunner().invoke(app, ["validate", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    steps = {s["name"]: s for s in json.loads(result.output)["steps"]}
    assert steps["train-nnodes-2"]["matrix"] == {"resources.nnodes": 2} and steps["train-nnodes-2"]["depends_on"] == []
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "MLRECIPE_STEP=train-nnodes-1" in result.output.replace("'", "").replace('"', "").replace(": ", "=")
    assert "train-nnodes-2" in result.output
    assert not (mlhome / "state").exists() or not any((mlhome / "state").rglob("state.json"))


SWEEP = """\
release: sw
sweep: {rank_by: eval_loss, goal: GOAL}
steps:
""" + STEP.format(name="train") + """\
    matrix:
      resources.nnodes: [1, 2, 3]
"""


def _fake_run(tmp_path: Path, goal: str) -> list:
    return _fake_run_of(tmp_path, load_pipeline(pipeline(tmp_path, SWEEP.replace("GOAL", goal))))


def _fake_run_of(tmp_path: Path, spec: ReleaseSpec) -> list[SweepTable]:
    """The sweep tables after three combinations succeeded, reporting eval_loss and acc (the third acc only)."""
    backend = get_backend("local", {})
    ctx = ReleaseContext("sw", "default", "local", tmp_path / "state")
    reported = {"train-nnodes-1": {"eval_loss": 0.5}, "train-nnodes-2": {"eval_loss": 0.25, "acc": 0.9},
                "train-nnodes-3": {"acc": 0.1}}
    record = ReleaseRecord("sw", "default", "local", {})
    for name, metrics in reported.items():
        step_dir = ctx.step_dir(name)
        step_dir.mkdir(parents=True)
        lines = [{"time": 1.0, "step": 1, "metrics": {k: v + 1 for k, v in metrics.items()}},
                 {"time": 2.0, "step": 2, "metrics": metrics}]  # the latest value counts
        (step_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        record.steps[name] = StepRecord(name, "data-prep/data-process", StepState.SUCCEEDED)
    return sweep_tables(spec, backend, ctx, record)


def test_the_table_ranks_combinations_by_the_metric(tmp_path: Path) -> None:
    (table,) = _fake_run(tmp_path, "min")
    assert [r.step for r in table.rows] == ["train-nnodes-2", "train-nnodes-1", "train-nnodes-3"]
    assert table.rows[0].metrics == {"eval_loss": 0.25, "acc": 0.9} and table.rows[0].combination == {
        "resources.nnodes": 2}
    assert table.metric_names == ["eval_loss", "acc"] and table.ranked
    out = io.StringIO()
    render(table, out)
    text = out.getvalue()
    assert "best first by eval_loss (min)" in text
    assert text.index("train-nnodes-2") < text.index("train-nnodes-1") < text.index("train-nnodes-3")
    assert "resources.nnodes" in text and "succeeded" in text and "0.25" in text


def test_the_table_ranks_highest_first_for_max(tmp_path: Path) -> None:
    (table,) = _fake_run(tmp_path, "max")
    assert [r.step for r in table.rows] == ["train-nnodes-1", "train-nnodes-2", "train-nnodes-3"]


def test_rank_keeps_rows_without_the_metric_last_in_order() -> None:
    rows = [SweepRow("a", "failed", {}), SweepRow("b", "succeeded", {}, {"m": 2.0}),
            SweepRow("c", "succeeded", {}, {"m": float("nan")}), SweepRow("d", "succeeded", {}, {"m": 1.0})]
    assert [r.step for r in rank(rows, "m", "min")] == ["d", "b", "a", "c"]
    assert [r.step for r in rank(rows, None, "min")] == ["a", "b", "c", "d"]


def test_a_progress_field_is_not_a_metric_to_rank_by(tmp_path: Path) -> None:
    path = pipeline(tmp_path, SWEEP.replace("eval_loss", "step").replace("GOAL", "min"))
    (error,) = load_error(path)
    assert "pipeline.yaml:2: sweep.rank_by: unknown metric 'step': a field of every progress line" in error


def test_a_metric_no_combination_reported_is_unknown(tmp_path: Path) -> None:
    spec = load_pipeline(pipeline(tmp_path, SWEEP.replace("eval_loss", "eval_los").replace("GOAL", "min")))
    tables = _fake_run_of(tmp_path, spec)
    message = unreported_rank_metric(spec, tables)
    assert message == (f"{tmp_path / 'pipeline.yaml'}:2: sweep.rank_by: unknown metric 'eval_los': no combination "
                       "of step train reported it (they reported acc, eval_loss)")
    tables[0].rows[0].state = "failed"
    assert unreported_rank_metric(spec, tables) is None, "a failed combination may be the one that would report it"
    ranked = load_pipeline(pipeline(tmp_path, SWEEP.replace("GOAL", "min")))
    assert unreported_rank_metric(ranked, _fake_run_of(tmp_path / "again", ranked)) is None
