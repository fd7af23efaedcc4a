"""Process bookkeeping of local steps: start them tied to the CLI, find them, stop them all."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time

import psutil

from mlrecipe.backends.local.handle import LocalHandle
from mlrecipe.runtime.step_runtime import NODE_TEMP_NAME_VAR, named_node_temp_dir

RUN_ID_VAR = "MLRECIPE_RUN_ID"
KILLED_SECONDS = 2.0  #: how long processes sent SIGKILL get to be gone before their temporary directories go


def die_with_parent() -> None:
    """``preexec_fn``: the node gets SIGTERM if the CLI dies (even by ``kill -9``)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _node_temp_name(run_id: str, rank: int) -> str:
    return f"{run_id}-{rank}"


def node_temp_env(run_id: str, rank: int) -> dict[str, str]:
    """What names node ``rank``'s temporary directory, so that :func:`stop_run` can remove it after a SIGKILL."""
    return {NODE_TEMP_NAME_VAR: _node_temp_name(run_id, rank)}


def exit_fd(pid: int) -> int | None:
    """A pidfd of the child ``pid``: readable once it exits, so that the runner waits on it instead of polling
    (``None`` where there are none: not Linux >= 5.3; the runner then looks every tick)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _leaders(handle: LocalHandle) -> list[psutil.Process]:
    out = []
    for node in handle.nodes:
        try:
            p = psutil.Process(node.pid)
            if node.created is None or abs(p.create_time() - node.created) < 0.01:
                out.append(p)
        except psutil.Error:
            continue
    return out


def members(run_id: str) -> list[psutil.Process]:
    """Every live process that belongs to the run ``run_id`` (found by its environment)."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(RUN_ID_VAR) == run_id and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def run_alive(handle: LocalHandle) -> bool:
    """Whether any process of the run described by ``handle`` is still alive."""
    return bool(_leaders(handle)) or bool(members(handle.run_id))


def _signal_all(handle: LocalHandle, sig: int) -> None:
    for p in _leaders(handle):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, sig)
    for p in members(handle.run_id):
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


def stop_run(handle: LocalHandle, grace: float, popens: list[subprocess.Popen[bytes]] | None = None) -> None:
    """SIGTERM every process of the run, wait up to ``grace`` seconds, then SIGKILL what is left; once nothing of
    the run is left, remove the nodes' temporary directories (a node's step runtime removes its own, unless it got
    SIGKILL)."""
    _signal_all(handle, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        for p in popens or []:
            p.poll()
        if not run_alive(handle):
            break
        time.sleep(0.1)
    _signal_all(handle, signal.SIGKILL)
    for p in popens or []:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
    deadline = time.monotonic() + KILLED_SECONDS
    while run_alive(handle) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not run_alive(handle):
        for node in handle.nodes:
            shutil.rmtree(named_node_temp_dir(_node_temp_name(handle.run_id, node.rank)), ignore_errors=True)
