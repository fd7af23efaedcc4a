"""Helpers for integration tests that run the real CLI and real processes."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.repo import BIN, REPO, cli_env

MLRECIPE = [str(BIN / "mlrecipe")]


def cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``mlrecipe ARGS`` to completion."""
    return subprocess.run([*MLRECIPE, *args], env=cli_env(home), capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def bash_recipe(directory: Path, script: str, nnodes: int = 2) -> Path:
    """A data-process recipe whose ``nnodes`` nodes each run the bash ``script`` (written beside it)."""
    (directory / "node.sh").write_text(script)
    recipe = directory / "bash-recipe.yaml"
    recipe.write_text(f"resources: {{nnodes: {nnodes}}}\nprocess: {{command: [bash, {directory / 'node.sh'}]}}\n")
    return recipe


def start_cli(home: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``mlrecipe ARGS`` as a terminal would start it in the foreground: SIGINT (Ctrl-C) not ignored, even
    when the tests themselves run in the background of a shell (which ignores SIGINT there, inherited by exec)."""
    return subprocess.Popen([*MLRECIPE, *args], env=cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    """Wait for a CLI started by :func:`start_cli`; on timeout kill it (its nodes die with it) and fail."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the CLI did not finish within {timeout}s; output:\n{out}") from None
    return out


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def release_processes(release: str, home: Path | None = None) -> list[psutil.Process]:
    """Live processes started for ``release`` (found by the env every node inherits); with ``home``, only
    those under that ``MLRECIPE_HOME``, so test runs side by side on one machine do not see each other's."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            env = p.environ()
            mine = home is None or env.get("MLRECIPE_HOME") == str(home)
            if mine and env.get("MLRECIPE_RELEASE") == release and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def release_tree(release: str, home: Path | None = None) -> set[psutil.Process]:
    """:func:`release_processes` with all their descendants: also the processes that renamed themselves
    (vLLM's ``VLLM::EngineCore``, Ray's workers: setproctitle hides their environment). Take it while the
    release runs; check it with :func:`still_alive` after it is stopped."""
    tree: set[psutil.Process] = set()
    for proc in release_processes(release, home):
        tree.add(proc)
        with contextlib.suppress(psutil.Error):
            tree.update(proc.children(recursive=True))
    return tree


def still_alive(procs: set[psutil.Process]) -> list[str]:
    """Those of ``procs`` still running (the same processes: a reused pid does not count), as ``pid name``."""
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.pid} {proc.name()}")
        except psutil.Error:
            continue
    return out


def state(home: Path, release: str, namespace: str = "default") -> dict:
    return json.loads((home / "releases" / "local" / namespace / release / "state.json").read_text())


def python() -> str:
    return sys.executable


def process_names(release: str, home: Path) -> list[str]:
    """Names of the live processes of ``release`` (those that exit while being looked at are left out)."""
    names = []
    for p in release_processes(release, home):
        try:
            names.append(p.name())
        except psutil.Error:
            continue
    return names


def ray_processes(home: Path) -> list[str]:
    """Ray's daemons started for releases under ``home`` (they inherit the step's environment)."""
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if proc.info["name"] in ("raylet", "gcs_server") and proc.environ().get("MLRECIPE_HOME") == str(home):
                found.append(f"{proc.pid} {proc.info['name']}")
        except psutil.Error:
            continue
    return found
