"""The watchdog's logic in process (no process started): durations, the recipe block and where it goes (the
host backends' step program, the charts' step.json), progress and the decision on a fake clock, the claim that
makes the nodes agree, and the reading of stacks (faulthandler's and py-spy's) into the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.host.contract import step_program
from mlrecipe.errors import SpecError
from mlrecipe.helm import chart_path, render_chart
from mlrecipe.runtime import step_runtime
from mlrecipe.runtime.step_runtime import Watchdog, WatchdogSettings, hang_culprit, parse_duration
from mlrecipe.spec.load import load_step_release

RANK0_IN_ALLREDUCE = """# node: 0
# pid: 100
# rank: 0
# method: faulthandler
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/work/train.py", line 18 in main
  File "/work/train.py", line 22 in <module>
"""
RANK1_SLEEPING = """# node: 1
# pid: 200
# rank: 1
# method: py-spy
Process 200: python /work/train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 200 (idle): "MainThread"
    load_batch (/work/data.py:41)
    main (/work/train.py:15)
    <module> (/work/train.py:22)
"""


def test_durations_read_as_recipes_write_them() -> None:
    assert [parse_duration(v) for v in ("10m", "90s", "1h30m", "2.5s", "500ms", 3, "45", 0.5)] == [
        600, 90, 5400, 2.5, 0.5, 3, 45, 0.5]
    for bad in ("", "10x", "m", "0s", -1, True, "1 h"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert [step_runtime.format_duration(s) for s in (600, 3, 5400, 2.5)] == ["10m", "3s", "1h30m", "2.5s"]


def test_settings_from_the_program() -> None:
    assert WatchdogSettings.from_program({"command": ["x"]}) is None
    assert WatchdogSettings.from_program({"watchdog": None}) is None
    assert WatchdogSettings.from_program({"watchdog": {"hang_timeout": "10m", "on_hang": "restart"}}) == \
        WatchdogSettings(600.0, "restart", 1)


def _recipe(tmp_path: Path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text("process: {command: ['true']}\n" + text)
    return str(path)


def test_recipe_block_is_validated_with_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as bad:
        load_step_release("r", "data-prep/data-process", [_recipe(tmp_path, "watchdog:\n  hang_timeout: 10x\n"
                                                                             "  on_hang: retry\n  nap: 1\n")])
    text = str(bad.value)
    assert "recipe.yaml:3" in text and "watchdog.hang_timeout" in text and "cannot read duration '10x'" in text
    assert "recipe.yaml:4" in text and "watchdog.on_hang" in text
    assert "recipe.yaml:5" in text and "watchdog.nap" in text
    with pytest.raises(SpecError, match=r"watchdog\.hang_timeout"):
        load_step_release("r", "data-prep/data-process", [_recipe(tmp_path, "watchdog: {on_hang: fail}\n")])


def test_host_step_program_carries_the_block_only_when_set(tmp_path: Path) -> None:
    ctx = ReleaseContext("r", "default", "local", tmp_path / "state")
    plain = load_step_release("r", "data-prep/data-process", [_recipe(tmp_path, "")]).steps[0]
    assert "watchdog" not in step_program(plain, ctx)
    watched = load_step_release("r", "data-prep/data-process",
                                [_recipe(tmp_path, "watchdog: {hang_timeout: 10m, on_hang: restart}\n")]).steps[0]
    assert step_program(watched, ctx)["watchdog"] == {"hang_timeout": "10m", "on_hang": "restart", "max_restarts": 1}


@pytest.mark.parametrize("chart", ["training/pytorchjob-distributed", "data-prep/data-process"])
def test_charts_render_the_block_into_step_json(chart: str) -> None:
    block = "train" if chart.startswith("training") else "process"
    values = {"image": "i", block: {"command": ["python3", "x.py"]}}
    plain = render_chart(chart_path(chart), values, "r", "ns")
    step = json.loads(next(o for o in plain if o["kind"] == "ConfigMap")["data"]["step.json"])
    assert "watchdog" not in step
    watched = render_chart(chart_path(chart), {**values, "watchdog": {"hang_timeout": "10m", "on_hang": "restart"}},
                           "r", "ns")
    step = json.loads(next(o for o in watched if o["kind"] == "ConfigMap")["data"]["step.json"])
    assert step["watchdog"] == {"hang_timeout": "10m", "on_hang": "restart"}
    assert WatchdogSettings.from_program(step) == WatchdogSettings(600.0, "restart", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watchdog(tmp_path: Path, node: int, clock: Clock) -> Watchdog:
    env = {"PET_NODE_RANK": str(node), "PET_NNODES": "2", "TMPDIR": str(tmp_path),
           "MLRECIPE_METRICS_FILE": str(tmp_path / "step" / "metrics.jsonl")}
    return Watchdog(WatchdogSettings(60.0), env, str(tmp_path / "step"), clock)


def test_progress_output_metrics_and_other_nodes_reset_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    dog, other = _watchdog(tmp_path, 0, clock), _watchdog(tmp_path, 1, clock)
    try:
        dog.start_attempt()
        clock.now += 59
        assert dog.check() is None
        dog.saw_output()
        clock.now += 59
        assert dog.check() is None, "own output is progress"
        (tmp_path / "step" / "metrics.jsonl").write_text('{"time": 1, "step": 1}\n')
        assert dog.check() is None
        clock.now += 59
        assert dog.check() is None, "a new progress line is progress"
        other.saw_output()  # node 1 prints: its activity file changes
        assert dog.check() is None
        clock.now += 59
        assert dog.check() is None, "another node's output is progress"
        clock.now += 1
        assert dog.check() == "decided"
        assert "PYTHONPATH" in dog.child_env({}) and dog.child_env({"PYTHONPATH": "/a"})["PYTHONPATH"].endswith(":/a")
        assert (Path(dog.private) / "sitecustomize.py").read_text() == step_runtime.SITECUSTOMIZE
    finally:
        dog.close()
        other.close()
    assert not os.path.exists(dog.private)


def test_one_claim_per_attempt_names_the_hang_for_every_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_runtime, "GATHER_SECONDS", 0.0)
    clock = Clock()
    shared = tmp_path / "step" / "watchdog"
    shared.mkdir(parents=True)
    (shared / "claim-0").write_text('{"dir": "hang-of-an-earlier-run"}')
    dog, other = _watchdog(tmp_path, 0, clock), _watchdog(tmp_path, 1, clock)
    try:
        dog.start_attempt()
        other.start_attempt()
        assert dog.check() is None and other.check() is None, "an earlier run's claim is no hang of this one"
        clock.now += 60
        assert dog.check() == "decided"
        first = dog._hang_dir()
        assert other.check() == "told"
        assert other._hang_dir() == first
        assert json.loads((shared / "hang.json").read_text())["dir"] == first
        dog.attempt = other.attempt = 1
        dog.start_attempt()
        clock.now += 1
        assert dog.check() is None, "the restarted attempt has a claim of its own"
    finally:
        dog.close()
        other.close()


def test_the_reason_names_the_first_rank_outside_a_collective(tmp_path: Path) -> None:
    (tmp_path / "node-0-pid-100.txt").write_text(RANK0_IN_ALLREDUCE)
    (tmp_path / "node-1-pid-200.txt").write_text(RANK1_SLEEPING)
    assert hang_culprit(str(tmp_path)) == ("rank 1 (node 1, pid 200) is not in a collective: in load_batch "
                                           "(/work/data.py:41)")
    (tmp_path / "node-1-pid-200.txt").write_text(RANK0_IN_ALLREDUCE.replace(": 0\n", ": 1\n"))
    assert hang_culprit(str(tmp_path), 2).startswith("every rank's stack is inside a collective")
    (tmp_path / "node-1-pid-200.txt").unlink()
    assert hang_culprit(str(tmp_path), 2) == ("every rank here is inside a collective; the stacks of node(s) 1 are "
                                              "not in this directory (see their own logs)")
    assert hang_culprit(str(tmp_path / "none")) == "no Python stacks could be taken"


def test_the_backends_read_the_reason(tmp_path: Path) -> None:
    assert step_runtime.read_hang_reason(tmp_path) is None
    (tmp_path / "watchdog").mkdir()
    (tmp_path / "watchdog" / "hang.json").write_text('{"dir": "hang-x"}')
    (tmp_path / "hang-x").mkdir()
    (tmp_path / "hang-x" / "reason.txt").write_text("hang: no progress for 10m; stacks in /s; rank 1 ...\n")
    assert step_runtime.read_hang_reason(tmp_path) == "hang: no progress for 10m; stacks in /s; rank 1 ..."


def test_a_config_file_default_watches_every_step_that_sets_none(tmp_path: Path, mlhome: Path) -> None:
    mlhome.mkdir(parents=True, exist_ok=True)
    (mlhome / "config.yaml").write_text("local: {}\nwatchdog: {hang_timeout: 30m}\n")
    ctx = ReleaseContext("r", "default", "local", tmp_path / "state")
    plain = load_step_release("r", "data-prep/data-process", [_recipe(tmp_path, "")]).steps[0]
    assert step_program(plain, ctx)["watchdog"]["hang_timeout"] == "30m"
    assert plain.chart_values()["watchdog"] == {"hang_timeout": "30m"}, "the charts get it too"
    own = load_step_release("r", "data-prep/data-process", [_recipe(tmp_path, "watchdog: {hang_timeout: 5m}\n")])
    assert step_program(own.steps[0], ctx)["watchdog"]["hang_timeout"] == "5m", "the recipe's own block wins"
    (mlhome / "config.yaml").write_text("local: {}\nwatchdog:\n  hang_timeout: soon\n")
    with pytest.raises(SpecError, match=r"config\.yaml:3.*watchdog\.hang_timeout"):
        load_step_release("r", "data-prep/data-process", [_recipe(tmp_path, "")])


def test_on_sagemaker_the_host_that_names_the_stuck_rank_writes_the_failure_reason(tmp_path: Path) -> None:
    env = {"SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-2", "SM_OUTPUT_DIR": str(tmp_path)}
    step_runtime._sagemaker_failure(env, "hang: ...; every rank here is inside a collective")
    assert not (tmp_path / "failure").exists(), "a host that cannot name the stuck rank leaves the reason to it"
    step_runtime._sagemaker_failure(env, "hang: ...; rank 1 (node 1, pid 7) is not in a collective: in f (x.py:1)")
    assert (tmp_path / "failure").read_text().startswith("hang: ...; rank 1 (node 1, pid 7)")
    step_runtime._sagemaker_failure({"SM_OUTPUT_DIR": str(tmp_path / "x")}, "rank 1 is not in a collective")
    assert not (tmp_path / "x").exists(), "outside SageMaker nothing is written"
