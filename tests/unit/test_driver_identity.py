"""The CLI process that drives a release is known by the one process identity, ``[pid, start ticks]``
(``mlrecipe.process_identity``, the host layer's too), and a record written by an earlier version (psutil's
``driver_created``, epoch seconds) still names its driver. This process is the driver; no process starts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from mlrecipe.backends.host import nodes
from mlrecipe.process_identity import identity, start_time, ticks_from_epoch
from mlrecipe.runner.state import STATE_FILE, ReleaseRecord, read_record
from mlrecipe.states import StepState


def test_a_release_records_its_driver_by_pid_and_start_ticks(mlhome: Path) -> None:
    record = ReleaseRecord("rel", "default", "local", {}, state=StepState.RUNNING)
    record.set_driver(os.getpid())
    record.save()
    saved = json.loads((record.directory / STATE_FILE).read_text(encoding="utf-8"))
    assert [saved["driver_pid"], saved["driver_started"]] == identity(os.getpid()) and saved["driver_created"] is None
    again = read_record(record.directory / STATE_FILE)
    assert again.driver() == identity(os.getpid()) and again.driver_alive()
    assert again.effective_state() is StepState.RUNNING
    again.driver_started = (again.driver_started or 0) + 1  # another process that got the pid
    assert not again.driver_alive() and again.effective_state() is StepState.INTERRUPTED
    again.set_driver(None)
    assert again.driver() is None and not again.driver_alive()


def test_the_host_layer_and_the_runner_share_one_identity() -> None:
    assert nodes.identity is identity and nodes.start_time is start_time


def test_a_record_of_an_earlier_version_still_names_its_driver(mlhome: Path) -> None:
    """Written as before: ``driver_pid`` and psutil's ``create_time``, no ``driver_started``."""
    created = psutil.Process(os.getpid()).create_time()
    assert ticks_from_epoch(created) == start_time(os.getpid())
    directory = mlhome / "releases" / "local" / "default" / "old"
    directory.mkdir(parents=True)
    old = {"release": "old", "namespace": "default", "backend": "local", "inputs": {}, "state": "running",
           "steps": {"s": {"name": "s", "chart": "data-prep/data-process", "state": "running"}}, "order": ["s"],
           "needs": {}, "created": 0.0, "updated": 0.0, "driver_pid": os.getpid(), "driver_created": created}
    (directory / STATE_FILE).write_text(json.dumps(old), encoding="utf-8")
    record = read_record(directory / STATE_FILE)
    assert record.driver() == identity(os.getpid()) and record.driver_alive()
    assert record.step_state(record.steps["s"]) is StepState.RUNNING, "still running as far as its driver goes"
    reused = read_record(directory / STATE_FILE)
    reused.driver_created = created - 10  # the pid now belongs to a process that started 10 s later
    assert not reused.driver_alive() and reused.step_state(reused.steps["s"]) is StepState.INTERRUPTED
    stopped = json.loads((directory / STATE_FILE).read_text(encoding="utf-8")) | {"state": "succeeded",
                                                                                  "driver_pid": None}
    (directory / STATE_FILE).write_text(json.dumps(stopped), encoding="utf-8")
    assert read_record(directory / STATE_FILE).effective_state() is StepState.SUCCEEDED
    record.set_driver(os.getpid())  # written again by this version: the identity, the old field dropped
    assert record.driver_created is None and record.driver_started == start_time(os.getpid())
