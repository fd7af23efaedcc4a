#!/usr/bin/env python3
"""The mlrecipe step runtime: the one program that runs inside every node of a step.

It runs unchanged as a local process, a Slurm task and a Kubernetes container (the charts
deliver this very file in a ConfigMap), and uses the Python standard library only.

Usage: ``python3 step_runtime.py STEP_JSON``

``STEP_JSON`` (the *step program*) holds::

    {"version": 1, "release": str, "namespace": str, "step": str, "chart": str,
     "git": {"repo_url": str, "branch": str|null, "commit": str|null} | null,
     "inline_script": [str], "pre_script": [str], "command": [str], "args": [str],
     "post_script": [str]}

In this order, in one bash session so that exports carry over, it: clones ``git`` into
``$HOME/tmp/$HOSTNAME`` (exported as ``GIT_CLONE_DIR``, the working directory afterwards),
runs the ``inline_script`` blocks, the ``pre_script`` lines, the command and its args joined
with spaces, the ``post_script`` lines, and removes the clone. Output is teed to
``$HOME/logs/<step>/node-<rank>.log``; SIGTERM/SIGINT/SIGHUP are forwarded to the whole
process group of the script; the exit status is the command's.

Before that it maps the scheduler's native variables (Slurm, Indexed Jobs, LeaderWorkerSet,
MPI) onto the env contract ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``,
``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, so recipes never branch on the backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

STATUS_VAR = "__MLRECIPE_STATUS"
GRACE_SECONDS = float(os.environ.get("MLRECIPE_STOP_GRACE", "15"))
DEFAULT_MASTER_PORT = "29500"


def _first_slurm_host(nodelist: str) -> str:
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.CalledProcessError):
        pass
    return nodelist.split(",")[0].split("[")[0]


def map_env_contract(env: dict[str, str]) -> dict[str, str]:
    """Return the variables to add so that the PET_* env contract holds in ``env``.

    Values already present win: the Kubeflow operator and the local backend set them directly.
    """
    add: dict[str, str] = {}

    def put(key: str, value: str | None) -> None:
        if value is not None and key not in env and key not in add:
            add[key] = value

    if "SLURM_JOB_ID" in env and "SLURM_NODEID" in env:
        put("PET_NNODES", env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES"))
        put("PET_NODE_RANK", env.get("SLURM_NODEID"))
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if nodelist:
            put("PET_MASTER_ADDR", _first_slurm_host(nodelist))
    if "JOB_COMPLETION_INDEX" in env:
        put("PET_NODE_RANK", env["JOB_COMPLETION_INDEX"])
    if "LWS_WORKER_INDEX" in env:
        put("PET_NODE_RANK", env["LWS_WORKER_INDEX"])
        put("PET_NNODES", env.get("LWS_GROUP_SIZE"))
        put("PET_MASTER_ADDR", env.get("LWS_LEADER_ADDRESS"))
    if "OMPI_COMM_WORLD_RANK" in env:
        put("PET_NODE_RANK", env.get("OMPI_COMM_WORLD_NODE_RANK", env["OMPI_COMM_WORLD_RANK"]))
    put("PET_NNODES", "1")
    put("PET_NPROC_PER_NODE", "1")
    put("PET_NODE_RANK", "0")
    put("PET_MASTER_ADDR", "127.0.0.1")
    put("PET_MASTER_PORT", DEFAULT_MASTER_PORT)
    return add


def build_script(program: dict) -> str:
    """Return the bash script that runs the step program, in the reference order."""
    lines = ["#!/usr/bin/env bash", "set -o pipefail"]
    git = program.get("git") or None
    if git and git.get("repo_url"):
        url = shlex.quote(git["repo_url"])
        lines += [
            'mkdir -p "$HOME/tmp"',
            'export GIT_CLONE_DIR="$HOME/tmp/$HOSTNAME"',
            '[[ -d "$GIT_CLONE_DIR" ]] && rm -rf "$GIT_CLONE_DIR"',
            f'git clone {url} "$GIT_CLONE_DIR" || exit $?',
            'cd "$GIT_CLONE_DIR" || exit $?',
        ]
        if git.get("branch"):
            lines.append(f"git checkout {shlex.quote(git['branch'])} || exit $?")
        if git.get("commit"):
            commit = shlex.quote(git["commit"])
            lines.append(f"git fetch origin {commit} >/dev/null 2>&1; git reset --hard {commit} || exit $?")
    lines += list(program.get("inline_script") or [])
    lines += list(program.get("pre_script") or [])
    command = " ".join(str(p).strip() for p in [*program.get("command", []), *program.get("args", [])])
    if command:
        lines.append(command)
        lines.append(f"{STATUS_VAR}=$?")
    else:
        lines.append(f"{STATUS_VAR}=0")
    lines += list(program.get("post_script") or [])
    if git and git.get("repo_url"):
        lines += ['cd "$HOME"', 'rm -rf "$GIT_CLONE_DIR"']
    lines.append(f"exit ${STATUS_VAR}")
    return "\n".join(lines) + "\n"


def _log_path(program: dict, env: dict[str, str]) -> str | None:
    home = env.get("HOME")
    if not home:
        return None
    step = program.get("step") or "step"
    return os.path.join(home, "logs", step, f"node-{env.get('PET_NODE_RANK', '0')}.log")


def _open_log(path: str | None):
    if not path:
        return None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "ab", buffering=0)
    except OSError as exc:
        sys.stderr.write(f"[mlrecipe] cannot write log {path}: {exc}\n")
        return None


def _set_parent_death_signal() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Forwarder:
    """Forwards termination signals to the child's process group, then kills it after a grace."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.stopping = False

    def __call__(self, signum: int, _frame: object) -> None:
        if self.stopping:
            return
        self.stopping = True
        self._signal(signum)
        threading.Thread(target=self._escalate, daemon=True).start()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signum)

    def _escalate(self) -> None:
        deadline = time.monotonic() + GRACE_SECONDS
        while time.monotonic() < deadline:
            if self.child.poll() is not None:
                break
            time.sleep(0.1)
        self._signal(signal.SIGKILL)


def run(program: dict, env: dict[str, str] | None = None) -> int:
    """Run one step program in this node and return the command's exit status."""
    env = dict(os.environ if env is None else env)
    env.update(map_env_contract(env))
    env.setdefault("MLRECIPE_RELEASE", str(program.get("release", "")))
    env.setdefault("MLRECIPE_STEP", str(program.get("step", "")))
    env.setdefault("HOSTNAME", os.uname().nodename)
    if env.get("HOME"):
        os.makedirs(env["HOME"], exist_ok=True)
    if env.get("MLRECIPE_METRICS_FILE"):  # progress is best effort: a read-only volume does not stop the step
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(env["MLRECIPE_METRICS_FILE"]) or ".", exist_ok=True)
    log = _open_log(_log_path(program, env))
    script = build_script(program)
    cwd = env["HOME"] if env.get("HOME") and os.path.isdir(env["HOME"]) else None
    child = subprocess.Popen(
        ["bash", "-c", script, "mlrecipe-step"],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_set_parent_death_signal,
    )
    forward = _Forwarder(child)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    out = sys.stdout.buffer
    assert child.stdout is not None
    for chunk in iter(lambda: child.stdout.readline(), b""):
        out.write(chunk)
        out.flush()
        if log is not None:
            log.write(chunk)
    status = child.wait()
    if forward.stopping:
        forward._signal(signal.SIGKILL)
    if log is not None:
        log.close()
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``step_runtime.py STEP_JSON`` (``--print-script`` shows the bash script)."""
    args = list(sys.argv[1:] if argv is None else argv)
    show = "--print-script" in args
    args = [a for a in args if a != "--print-script"]
    if len(args) != 1:
        sys.stderr.write("usage: step_runtime.py [--print-script] STEP_JSON\n")
        return 2
    with open(args[0], encoding="utf-8") as fh:
        program = json.load(fh)
    if show:
        sys.stdout.write(build_script(program))
        return 0
    return run(program)


if __name__ == "__main__":
    sys.exit(main())
