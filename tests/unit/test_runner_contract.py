"""The release runner driven through the backend contract alone, with the fake backend of
``tests/unit/fake_backend.py`` (what each step does is its command: ``ok``, ``fail``, ``serve``, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlrecipe.cli.execute import run_inputs
from mlrecipe.errors import ExitCode
from mlrecipe.runner.state import load_record
from tests.unit.fake_backend import WORLD

pytestmark = pytest.mark.usefixtures("fake_backend")


def pipeline(tmp_path: Path, **commands: str) -> dict[str, Any]:
    """A pipeline whose steps (in order) run the given commands; ``serve`` steps are servers."""
    lines = ["release: rel", "steps:"]
    for name, command in commands.items():
        chart = "serving/generic-server" if command == "serve" else "data-prep/data-process"
        block = "server" if command == "serve" else "process"
        lines += [f"  - name: {name}", f"    chart: {chart}", "    values:", "      pvc: []",
                  f"      {block}: {{command: [{command}]}}"]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return {"kind": "pipeline", "path": str(path), "sets": []}


def run(inputs: dict[str, Any], *opts: str, force: bool = False) -> ExitCode:
    return run_inputs(inputs, "fake", list(opts), False, force, "text")


def states() -> dict[str, str]:
    record = load_record("fake", "default", "rel")
    assert record is not None
    return {name: step.state.value for name, step in record.steps.items()} | {"*": record.state.value}


def test_success_then_unchanged_steps_are_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, prep="ok", train="ok")
    assert run(inputs) == ExitCode.OK
    assert WORLD.submitted == ["prep", "train"]
    assert states() == {"prep": "succeeded", "train": "succeeded", "*": "succeeded"}
    assert run(inputs) == ExitCode.OK
    assert WORLD.submitted == ["prep", "train"], "unchanged successes are not submitted again"
    assert "skipped (unchanged since its last success" in capsys.readouterr().out
    assert run(inputs, force=True) == ExitCode.OK
    assert WORLD.submitted == ["prep", "train"] * 2


def test_a_live_server_is_reused_and_its_url_reaches_later_steps(tmp_path: Path) -> None:
    inputs = pipeline(tmp_path, serve="serve", client="ok")
    assert run(inputs) == ExitCode.OK
    assert states() == {"serve": "serving", "client": "succeeded", "*": "serving"}
    assert WORLD.envs["client"]["MLRECIPE_SERVE_URL"] == "http://fake/serve"
    record = load_record("fake", "default", "rel")
    assert record is not None and record.steps["serve"].url == "http://fake/serve"
    assert record.steps["serve"].handle["run"] == "serve-1", "the typed handle is persisted as JSON"

    WORLD.envs.clear()
    (tmp_path / "pipeline.yaml").write_text((tmp_path / "pipeline.yaml").read_text().replace(
        "command: [ok]", "command: [ok, again]"))
    assert run(inputs) == ExitCode.OK
    assert WORLD.submitted == ["serve", "client", "client"], "the server is reused, the changed client re-runs"
    assert WORLD.envs["client"]["MLRECIPE_SERVE_URL"] == "http://fake/serve"
    assert WORLD.cancelled == []


def test_a_changed_or_dead_server_is_restarted(tmp_path: Path) -> None:
    inputs = pipeline(tmp_path, serve="serve")
    assert run(inputs) == ExitCode.OK
    path = tmp_path / "pipeline.yaml"
    path.write_text(path.read_text().replace("server: {command: [serve]}", "server: {command: [serve], name: v2}"))
    assert run(inputs) == ExitCode.OK
    assert WORLD.cancelled == ["serve-1"], "the changed server's old instance is stopped first"
    assert WORLD.alive == {"serve-2"}
    WORLD.alive.clear()  # the server died
    assert run(inputs) == ExitCode.OK
    assert WORLD.submitted == ["serve"] * 3


def test_failure_stops_the_release_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(pipeline(tmp_path, prep="ok", train="fail", evaluate="ok")) == ExitCode.FAILED
    assert WORLD.submitted == ["prep", "train"]
    assert states() == {"prep": "succeeded", "train": "failed", "*": "failed"}
    out = capsys.readouterr().out
    assert "node 0 exited with status 3" in out and "boom" in out


def test_refused_submission_is_a_failed_step_without_traceback(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run(pipeline(tmp_path, train="refuse")) == ExitCode.FAILED
    captured = capsys.readouterr()
    assert "submission failed: the fake cluster refused the job: quota exceeded" in captured.out
    assert "Traceback" not in captured.out + captured.err


def test_interrupt_cancels_the_running_step_with_exit_130(tmp_path: Path) -> None:
    assert run(pipeline(tmp_path, prep="ok", train="interrupt", evaluate="ok")) == ExitCode.INTERRUPTED
    assert WORLD.cancelled == ["train-2"]
    assert states() == {"prep": "succeeded", "train": "interrupted", "*": "interrupted"}


def test_the_runner_waits_on_the_wakeup_descriptors_of_running_steps(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two looks the runner sleeps on what running steps give it (a local node's pidfd), not a tick."""
    from mlrecipe.backends import base

    waits: list[tuple[list[int], float]] = []

    def sleep(fds: list[int], timeout: float) -> None:
        waits.append((list(fds), timeout))
        assert fds, "a step whose descriptor is given is waited on"
        base.sleep_until_readable(fds, 3600)  # returns at once: the descriptor is readable

    monkeypatch.setattr("mlrecipe.runner.release.sleep_until_readable", sleep)
    assert run(pipeline(tmp_path, train="wake")) == ExitCode.OK
    assert len(waits) == 1 and len(waits[0][0]) == 1
    assert states() == {"train": "succeeded", "*": "succeeded"}


def test_bad_input_is_exit_2_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, prep="ok")
    assert run(inputs, "flaky_pols=1") == ExitCode.USAGE
    assert "unknown option 'flaky_pols'" in capsys.readouterr().err
    bad = tmp_path / "mpi.yaml"
    bad.write_text("release: rel\nsteps:\n  - name: m\n    chart: training/mpijob\n    values:\n"
                   "      train: {command: [ok]}\n")
    assert run({"kind": "pipeline", "path": str(bad), "sets": []}) == ExitCode.USAGE
    assert "not supported on backend fake" in capsys.readouterr().err
    assert WORLD.submitted == [] and load_record("fake", "default", "rel") is None


def test_a_backend_that_cannot_answer_is_asked_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, train="flaky")
    assert run(inputs) == ExitCode.OK
    assert run(inputs, "retry_seconds=0", "flaky_polls=1000", force=True) == ExitCode.FAILED
    assert "backend failed: controller busy (still failing after" in capsys.readouterr().out


def test_node_count_and_notes_come_from_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, prep="ok")
    inputs["sets"] = ["prep.resources.nnodes=3"]
    assert run(inputs) == ExitCode.OK
    out = capsys.readouterr().out
    assert "note: prep runs nowhere" in out and "starting 3 node(s)" in out


def dag(tmp_path: Path, steps: dict[str, tuple[str, list[str]]]) -> dict[str, Any]:
    """A pipeline of ``name: (command, depends_on)`` steps."""
    lines = ["release: rel", "steps:"]
    for name, (command, needs) in steps.items():
        lines += [f"  - name: {name}", "    chart: data-prep/data-process", f"    depends_on: {needs}",
                  "    values:", "      pvc: []", f"      process: {{command: [{command}]}}"]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return {"kind": "pipeline", "path": str(path), "sets": []}


DIAMOND = {"prep": ("ok", []), "left": ("slow", ["prep"]), "right": ("slow", ["prep"]),
           "merge": ("ok", ["left", "right"])}


def test_independent_branches_run_at_the_same_time(tmp_path: Path) -> None:
    assert run_inputs(dag(tmp_path, DIAMOND), "fake", [], False, False, "text") == ExitCode.OK
    assert WORLD.most_at_once == 2, "left and right ran together"
    assert WORLD.submitted[0] == "prep" and WORLD.submitted[-1] == "merge"
    assert states() == dict.fromkeys([*DIAMOND, "*"], "succeeded")


def test_max_parallel_bounds_the_branches(tmp_path: Path) -> None:
    assert run_inputs(dag(tmp_path, DIAMOND), "fake", [], False, False, "text", max_parallel=1) == ExitCode.OK
    assert WORLD.most_at_once == 1


def test_a_failure_cancels_the_running_branch_by_default(tmp_path: Path) -> None:
    steps = {**DIAMOND, "left": ("slowfail", ["prep"]), "right": ("slower", ["prep"])}
    assert run_inputs(dag(tmp_path, steps), "fake", [], False, False, "text") == ExitCode.FAILED
    assert states() == {"prep": "succeeded", "left": "failed", "right": "interrupted", "*": "failed"}
    assert [r for r in WORLD.cancelled if r.startswith("right")], "the running branch was stopped"
    record = load_record("fake", "default", "rel")
    assert record is not None and record.steps["right"].message == "cancelled: step left failed"


def test_keep_going_lets_independent_branches_finish(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = {**DIAMOND, "left": ("fail", ["prep"]), "after-left": ("ok", ["left"])}
    assert run_inputs(dag(tmp_path, steps), "fake", [], False, False, "text", keep_going=True) == ExitCode.FAILED
    assert states() == {"prep": "succeeded", "left": "failed", "right": "succeeded", "*": "failed"}
    out = capsys.readouterr().out
    assert "merge: skipped (not run: it depends on left)" in out
    assert "after-left: skipped (not run: it depends on left)" in out
    assert run_inputs(dag(tmp_path, {**steps, "left": ("ok", ["prep"])}), "fake", [], False, False,
                      "text") == ExitCode.OK, "the fixed branch runs, the finished ones are skipped"
    assert WORLD.submitted.count("right") == 1
