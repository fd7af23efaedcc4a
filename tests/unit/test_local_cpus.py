"""Parallel local steps share the machine's CPUs: a step waits (saying why) until its ranks fit beside the running
steps', always starts when no other step runs, and a server does not count."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.base import StepState
from mlrecipe.backends.host.cpus import CpuSlots
from mlrecipe.backends.local.options import LocalOptions
from mlrecipe.backends.local.plan import LocalPlan, NodeLaunch
from mlrecipe.backends.local.running import LocalRunningStep


def test_slots_fit_or_run_alone() -> None:
    slots = CpuSlots(2)
    assert slots.take("big", 8), "a step larger than the machine runs when nothing else does"
    assert not slots.take("small", 1)
    slots.release("big")
    assert slots.take("a", 1) and slots.take("b", 1) and not slots.take("c", 1)
    assert slots.take("a", 1), "taking again is holding"
    assert "its 1 rank(s) and the 2 of the running steps do not fit this machine's 2 CPU(s)" in slots.waiting_note(1, 3)
    slots.release("a")
    slots.release("a")
    assert slots.used == 1 and slots.take("c", 1)


def test_the_bound_is_the_option_or_the_usable_cpus() -> None:
    assert LocalOptions(cpus=3).cpu_count() == 3
    assert LocalOptions().cpu_count() >= 1


def step(tmp_path: Path, name: str, gate: Path, ranks: int, cpus: CpuSlots) -> LocalRunningStep:
    """One node that exits 0 once ``gate`` exists."""
    node = NodeLaunch(0, ["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done'], {},
                      tmp_path / f"{name}.log")
    plan = LocalPlan(step=name, chart="data-prep/data-process", program={}, program_path=tmp_path / "program.json",
                     nodes=[node], ranks=ranks)
    return LocalRunningStep(plan, f"run-{name}", grace=5, lease_dir=tmp_path / "leases", cpus=cpus)


@pytest.mark.integration
def test_a_step_waits_for_cpus_until_a_running_step_ends(tmp_path: Path) -> None:
    cpus = CpuSlots(2)
    first = step(tmp_path, "first", tmp_path / "first-done", 2, cpus)
    second = step(tmp_path, "second", tmp_path / "second-done", 2, cpus)
    try:
        assert first.take_devices() is None
        first.start()
        wait = second.take_devices()
        assert wait is not None and wait.busy == () and wait.ranks == 2
        assert second.poll() is None and not second.started
        assert "for CPUs: its 2 rank(s) and the 2 of the running steps" in second.progress_note()
        (tmp_path / "first-done").touch()
        outcome = first.wait(0.05)
        assert outcome.state is StepState.SUCCEEDED and cpus.used == 0, "an ended step gives its CPUs back"
        assert second.poll() is None and second.started and second.progress_note() == ""
        assert cpus.holders == {"run-second": 2}
        second.cancel()
        assert cpus.used == 0, "a cancelled step gives its CPUs back"
    finally:
        for gate in ("first-done", "second-done"):
            (tmp_path / gate).touch()
        first.cancel()
        second.cancel()


def test_a_step_needs_a_cpu_per_rank_and_a_server_none(tmp_path: Path, mlhome: Path) -> None:
    from mlrecipe.backends.base import ReleaseContext
    from mlrecipe.backends.local.backend import LocalBackend
    from mlrecipe.spec.load import load_step_release

    def ranks(chart: str, recipe: str) -> int:
        path = tmp_path / "recipe.yaml"
        path.write_text(recipe)
        spec = load_step_release("r", chart, [str(path)])
        backend = LocalBackend(LocalOptions(gpus="cpu"))
        return backend.plan(spec.steps[0], ReleaseContext("r", "default", "local", tmp_path / "state")).ranks

    assert ranks("data-prep/data-process", "pvc: []\nresources: {nnodes: 2, nproc_per_node: 3}\n"
                 "process: {command: ['true']}\n") == 6
    assert ranks("training/pytorchjob-elastic", "pvc: []\nresources: {nnodes: 1}\nelastic_policy: {max_replicas: 2}\n"
                 "train: {command: ['true']}\n") == 2, "an elastic step's largest size"
    assert ranks("serving/generic-server", "pvc: []\nserver: {command: [python3, -m, http.server]}\n") == 0
