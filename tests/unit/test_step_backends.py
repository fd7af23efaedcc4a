"""Hybrid pipelines through the backend contract: a step that names its own backend runs there, in the same
release (state, skip, resume, status, uninstall), with the fake backend of ``tests/unit/fake_backend.py`` and a second
fake registered the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlrecipe.backends import registry
from mlrecipe.backends.base import QueuesAhead, ReleaseContext
from mlrecipe.cli import execute, inspect_cmd
from mlrecipe.errors import ExitCode
from mlrecipe.runner.state import load_record
from tests.unit.fake_backend import WORLD, FakeBackend, FakePlan, FakeRunning

CONTEXTS: list[tuple[str, str, str, list[str]]] = []  #: (step, backend, ctx.runs_on, upcoming) per submission


class RecordingFake(FakeBackend):
    def submit(self, plan: FakePlan, ctx: ReleaseContext) -> FakeRunning:
        CONTEXTS.append((plan.step, self.name, ctx.runs_on, [s.name for s in ctx.upcoming]))
        return super().submit(plan, ctx)


class OtherBackend(QueuesAhead, RecordingFake):
    name = "other"

    def cancel_handle(self, handle: Any) -> None:
        WORLD.cancelled.append(f"other:{handle.run}")


@pytest.fixture(autouse=True)
def other_backend(monkeypatch: pytest.MonkeyPatch, fake_backend: None) -> None:
    CONTEXTS.clear()
    monkeypatch.setitem(registry.BACKENDS, "fake", f"{__name__}:RecordingFake")
    monkeypatch.setitem(registry.BACKENDS, "other", f"{__name__}:OtherBackend")


def pipeline(tmp_path: Path, steps: list[tuple[str, str, str | None]]) -> dict[str, Any]:
    """A file-order pipeline of ``(name, command, backend)`` steps."""
    lines = ["release: rel", "backend: fake", "steps:"]
    for name, command, backend in steps:
        lines += [f"  - name: {name}", "    chart: data-prep/data-process"]
        lines += [f"    backend: {backend}"] if backend else []
        lines += ["    values:", "      pvc: []", f"      process: {{command: [{command}]}}"]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return {"kind": "pipeline", "path": str(path), "sets": []}


def run(inputs: dict[str, Any], force: bool = False) -> ExitCode:
    return execute.run_inputs(inputs, None, [], False, force, "text")


def test_each_step_runs_on_its_backend_in_one_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, [("data", "ok", None), ("train", "ok", "other"), ("evaluate", "ok", None)])
    assert run(inputs) == ExitCode.OK
    assert [(step, backend, runs_on) for step, backend, runs_on, _ in CONTEXTS] == [
        ("data", "fake", ""), ("train", "other", "other"), ("evaluate", "fake", "")]
    record = load_record("fake", "default", "rel")
    assert record is not None and load_record("other", "default", "rel") is None, "one release, one record"
    assert {n: s.backend for n, s in record.steps.items()} == {"data": "fake", "train": "other", "evaluate": "fake"}
    assert record.needs == {"data": [], "train": ["data"], "evaluate": ["train"]}
    assert "step train (data-prep/data-process on other)" in capsys.readouterr().out

    assert run(inputs) == ExitCode.OK
    assert len(CONTEXTS) == 3, "unchanged successes are skipped on every backend"
    assert "step train: skipped (unchanged" in capsys.readouterr().out


def test_a_step_moved_to_another_backend_runs_again(tmp_path: Path) -> None:
    assert run(pipeline(tmp_path, [("data", "ok", None), ("train", "ok", None)])) == ExitCode.OK
    assert run(pipeline(tmp_path, [("data", "ok", None), ("train", "ok", "other")])) == ExitCode.OK
    assert [c[:2] for c in CONTEXTS] == [("data", "fake"), ("train", "fake"), ("train", "other")]


def test_a_queue_ahead_backend_sees_only_its_own_next_steps(tmp_path: Path) -> None:
    steps = [("a", "ok", "other"), ("b", "ok", "other"), ("c", "ok", None), ("e", "ok", None), ("d", "ok", "other")]
    assert run(pipeline(tmp_path, steps)) == ExitCode.OK
    upcoming = {step: later for step, _, _, later in CONTEXTS}
    assert (upcoming["a"], upcoming["b"], upcoming["d"]) == (["b"], [], []), "never past a step of another backend"
    assert upcoming["c"] == [], "a backend that does not declare QueuesAhead is told of no later step"


def test_status_resume_and_uninstall_reach_each_steps_backend(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, [("data", "ok", None), ("train", "fail", "other")])
    assert run(inputs) == ExitCode.FAILED
    capsys.readouterr()
    assert inspect_cmd.status("rel", None, None, "json", []) == ExitCode.OK
    (doc,) = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["backend"], s["state"], s["needs"]) for s in doc["steps"]] == [
        ("data", "fake", "succeeded", []), ("train", "other", "failed", ["data"])]
    assert inspect_cmd.status("rel", None, None, "text", []) == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    train = next(line for line in lines if line.strip().startswith("train"))
    assert train.split()[:3] == ["train", "failed", "other"] and "needs data" in train

    (tmp_path / "pipeline.yaml").write_text((tmp_path / "pipeline.yaml").read_text().replace("[fail]", "[ok]"))
    assert execute.resume("rel", None, None, "text", []) == ExitCode.OK
    assert [c[:2] for c in CONTEXTS] == [("data", "fake"), ("train", "other"), ("train", "other")]
    assert execute.uninstall("rel", None, None, []) == ExitCode.OK
    assert [r for r in WORLD.cancelled if r.startswith("other:train")], "cancelled on its own backend"
    assert load_record("fake", "default", "rel") is None


def test_unknown_step_backend_is_exit_2_at_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, [("data", "ok", None), ("train", "ok", "slurmm")])
    assert run(inputs) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"{tmp_path / 'pipeline.yaml'}:11: steps[1].backend: unknown backend 'slurmm'" in err, err
    assert CONTEXTS == [] and load_record("fake", "default", "rel") is None, "nothing started, no state"
    assert inspect_cmd.validate(tmp_path / "pipeline.yaml", None, "text") == ExitCode.USAGE
    assert "steps[1].backend: unknown backend 'slurmm'" in capsys.readouterr().err


def test_validate_and_dry_run_check_and_show_each_step_on_its_backend(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    inputs = pipeline(tmp_path, [("data", "ok", None), ("train", "ok", "other")])
    assert inspect_cmd.validate(tmp_path / "pipeline.yaml", None, "text") == ExitCode.OK
    assert "planned for backend fake (data), other (train)" in capsys.readouterr().out
    assert execute.run_inputs(inputs, None, [], True, False, "text") == ExitCode.OK
    out = capsys.readouterr().out
    assert out.index("# ==== step data: backend fake ====") < out.index("# ==== step train: backend other ====")
    path = tmp_path / "pipeline.yaml"
    text = path.read_text().replace("chart: data-prep/data-process\n    backend: other",
                                    "chart: training/pytorchjob-distributed\n    backend: other")
    path.write_text(text[:text.rindex("process:")] + "train: {command: [ok]}\n")
    assert inspect_cmd.validate(path, None, "text") == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "step train: chart training/pytorchjob-distributed (torch) is not supported on backend other" in err, err
    assert "step data" not in err, "the data step's backend runs it"
