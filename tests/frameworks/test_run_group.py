"""The launcher helper ends on its timeout even when a process it started left its session (torch's elastic agent
starts each rank in a session of its own) and holds the output pipes open: every process it started is killed."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tests.frameworks.helpers import GROUP_VAR, _run_group

pytestmark = pytest.mark.integration

#: A "launcher" that starts a "rank" in a new session (holding stdout), then waits as a hung launcher would.
LAUNCHER = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True); "
            "time.sleep(300)")


def test_a_timeout_kills_a_rank_in_its_own_session_and_returns(tmp_path: Path) -> None:
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            _run_group([sys.executable, "-c", LAUNCHER], tmp_path, {"PATH": "/usr/bin:/bin"}, timeout=3)
            outcome.append(None)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(90)
    assert not worker.is_alive(), "the helper never returned: a process it started still holds its pipes"
    assert len(outcome) == 1 and isinstance(outcome[0], subprocess.TimeoutExpired)
    left = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if GROUP_VAR in proc.environ() and proc.cmdline()[-1:] == ["import time; time.sleep(300)"]:
                left.append(proc.pid)
        except psutil.Error:
            continue
    assert left == []
