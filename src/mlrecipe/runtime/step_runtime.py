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
``$HOME/logs/<step>/node-<rank>.log`` (``node-<rank>-rank-<MPI rank>.log`` on an MPI slot);
SIGTERM/SIGINT/SIGHUP are forwarded to the whole process group of the script; the exit status is the command's.

Before that it maps the scheduler's native variables (Slurm, Indexed Jobs, LeaderWorkerSet,
MPI, SageMaker's ``resourceconfig.json`` / ``SM_HOSTS``) onto the env contract ``PET_NNODES``,
``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, so recipes never
branch on the backend. On SageMaker it first waits (bounded by ``MLRECIPE_RESOLVE_TIMEOUT`` seconds)
until the master's host name resolves, as SageMaker's hosts may not resolve at once.

Unless the step sets ``TMPDIR`` itself (an ebs volume at /tmp, a site's per-job directory), the node gets a
temporary directory of its own under /tmp, exported as ``TMPDIR`` and removed when the script ends, as a pod's
/tmp goes with the pod: what the step's programs leave there (vLLM's IPC sockets, torchrun's ``torchelastic_*``
directories, a private Ray's sessions) does not pile up on a shared machine. TorchInductor's compile cache, which
is worth keeping between runs, stays where it would have been (``TORCHINDUCTOR_CACHE_DIR``).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

STATUS_VAR = "__MLRECIPE_STATUS"
GRACE_SECONDS = float(os.environ.get("MLRECIPE_STOP_GRACE", "15"))
DEFAULT_MASTER_PORT = "29500"
SAGEMAKER_RESOURCE_CONFIG = "/opt/ml/input/config/resourceconfig.json"
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
SHARED_TEMP_ROOT = "/tmp"
NODE_TEMP_PREFIX = "mlrecipe-tmp-"  # short: programs put Unix sockets (at most 107 bytes a path) under TMPDIR
#: Set by a backend that removes a node's temporary directory after a kill nothing in the node survives (SIGKILL):
#: the directory's name after :data:`NODE_TEMP_PREFIX` (:func:`named_node_temp_dir`).
NODE_TEMP_NAME_VAR = "MLRECIPE_NODE_TEMP_NAME"


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


def sagemaker_hosts(
    env: dict[str, str], resource_config: str = SAGEMAKER_RESOURCE_CONFIG
) -> tuple[list[str], str] | None:
    """SageMaker's sorted host list and the current host, from ``resourceconfig.json`` or ``SM_HOSTS`` /
    ``SM_CURRENT_HOST``; ``None`` outside a SageMaker training container."""
    config: dict = {}
    if os.path.isfile(resource_config):
        try:
            with open(resource_config, encoding="utf-8") as fh:
                config = json.load(fh)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"[mlrecipe] cannot read {resource_config}: {exc}\n")
    hosts = config.get("hosts")
    current = config.get("current_host")
    if not hosts and env.get("SM_HOSTS"):
        try:
            hosts = json.loads(env["SM_HOSTS"])
        except ValueError:
            hosts = [h for h in env["SM_HOSTS"].split(",") if h]
    current = current or env.get("SM_CURRENT_HOST")
    if not hosts or not current or current not in hosts:
        return None
    return sorted(str(h) for h in hosts), str(current)


def _local_gpus(env: dict[str, str]) -> int:
    if env.get("SM_NUM_GPUS", "").isdigit():
        return int(env["SM_NUM_GPUS"])
    try:
        return len(os.listdir(NVIDIA_GPUS_DIR))
    except OSError:
        return 0


def map_env_contract(env: dict[str, str], resource_config: str = SAGEMAKER_RESOURCE_CONFIG) -> dict[str, str]:
    """Return the variables to add so that the PET_* env contract holds in ``env``.

    Values already present win: the Kubeflow operator and the local backend set them directly.
    In a SageMaker training container (``resource_config`` exists, or ``SM_HOSTS``/``SM_CURRENT_HOST``
    are set) the nodes are SageMaker's hosts, sorted; the master is the first host.
    """
    add: dict[str, str] = {}

    def put(key: str, value: str | None) -> None:
        if value is not None and key not in env and key not in add:
            add[key] = value

    found = sagemaker_hosts(env, resource_config)
    if found is not None:
        hosts, current = found
        put("PET_NNODES", str(len(hosts)))
        put("PET_NODE_RANK", str(hosts.index(current)))
        put("PET_MASTER_ADDR", hosts[0])
        put("PET_NPROC_PER_NODE", str(max(_local_gpus(env), 1)))

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
        put("PET_NODE_RANK", str(mpi_node_index(env)))
    put("PET_NNODES", "1")
    put("PET_NPROC_PER_NODE", "1")
    put("PET_NODE_RANK", "0")
    put("PET_MASTER_ADDR", "127.0.0.1")
    put("PET_MASTER_PORT", DEFAULT_MASTER_PORT)
    if "PET_RDZV_BACKEND" in env or "PET_RDZV_BACKEND" in add:
        merged = {**env, **add}
        put("PET_RDZV_ENDPOINT", f"{merged['PET_MASTER_ADDR']}:{merged['PET_MASTER_PORT']}")
    return add


def mpi_node_index(env: dict[str, str]) -> int:
    """The node index of an Open MPI rank (an MPIJob's launcher runs the runtime on every slot): its world rank over
    the slots per node, as ``-map-by slot`` fills a hostfile of ``slots=PET_NPROC_PER_NODE`` lines. Open MPI's
    ``OMPI_COMM_WORLD_NODE_RANK`` is the rank's place on its node, not the node's place."""
    rank = int(env["OMPI_COMM_WORLD_RANK"])
    slots = env.get("PET_NPROC_PER_NODE") or env.get("OMPI_COMM_WORLD_LOCAL_SIZE") or "1"
    return rank // max(int(slots), 1) if slots.isdigit() else rank


def wait_for_host(host: str, timeout: float, interval: float = 1.0,
                  resolve: Callable[[str, None], object] = socket.getaddrinfo) -> str | None:
    """Wait until ``host`` resolves, at most ``timeout`` seconds; ``None`` when it does, else the last error."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        try:
            resolve(host, None)
            return None
        except OSError as exc:
            error = f"{exc}"
        if time.monotonic() + interval > deadline:
            return error
        if not said:
            sys.stderr.write(f"[mlrecipe] waiting for host {host} to resolve (up to {timeout:.0f} s): {error}\n")
            said = True
        time.sleep(interval)


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
    node = env.get("PET_NODE_RANK", "0")
    if "OMPI_COMM_WORLD_RANK" in env:  # every MPI slot runs a runtime: one log per rank
        return os.path.join(home, "logs", step, f"node-{node}-rank-{env['OMPI_COMM_WORLD_RANK']}.log")
    return os.path.join(home, "logs", step, f"node-{node}.log")


def _open_log(path: str | None) -> BinaryIO | None:
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


def named_node_temp_dir(name: str) -> str:
    """The path of the node temporary directory called ``name`` (:data:`NODE_TEMP_NAME_VAR`)."""
    return os.path.join(SHARED_TEMP_ROOT, NODE_TEMP_PREFIX + name)


def _new_node_temp_dir(name: str) -> str:
    """The directory the backend named (only this user may enter it), else a new random one."""
    if name and os.path.basename(name) == name:
        path = named_node_temp_dir(name)
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            pass
    return tempfile.mkdtemp(prefix=NODE_TEMP_PREFIX, dir=SHARED_TEMP_ROOT)


def node_temp_dir(env: dict[str, str]) -> str | None:
    """Make this node's own temporary directory and point ``env`` at it (``TMPDIR``, and TorchInductor's cache at
    its usual shared place); ``None``, with ``env`` unchanged, when ``env`` sets ``TMPDIR`` already or /tmp takes no
    new directory (a read-only root file system)."""
    if env.get("TMPDIR"):
        return None
    try:
        path = _new_node_temp_dir(env.get(NODE_TEMP_NAME_VAR, ""))
    except OSError:
        return None
    env["TMPDIR"] = path
    with contextlib.suppress(KeyError, OSError):
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(SHARED_TEMP_ROOT, f"torchinductor_{getpass.getuser()}"))
    return path


def run(program: dict, env: dict[str, str] | None = None) -> int:
    """Run one step program in this node and return the command's exit status."""
    env = dict(os.environ if env is None else env)
    env.update(map_env_contract(env))
    if sagemaker_hosts(env) is not None:
        timeout = float(env.get("MLRECIPE_RESOLVE_TIMEOUT", "300"))
        error = wait_for_host(env["PET_MASTER_ADDR"], timeout)
        if error is not None:
            sys.stderr.write(f"[mlrecipe] error: the master host {env['PET_MASTER_ADDR']} did not resolve within "
                             f"{timeout:.0f} s (MLRECIPE_RESOLVE_TIMEOUT): {error}\n")
            return 1
    env.setdefault("MLRECIPE_RELEASE", str(program.get("release", "")))
    env.setdefault("MLRECIPE_STEP", str(program.get("step", "")))
    env.setdefault("HOSTNAME", os.uname().nodename)
    if env.get("HOME"):
        os.makedirs(env["HOME"], exist_ok=True)
    if env.get("MLRECIPE_METRICS_FILE"):  # progress is best effort: a read-only volume does not stop the step
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(env["MLRECIPE_METRICS_FILE"]) or ".", exist_ok=True)
    log = _open_log(_log_path(program, env))
    temp_dir = node_temp_dir(env)
    try:
        return _run_script(program, env, log)
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _run_script(program: dict, env: dict[str, str], log: BinaryIO | None) -> int:
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
    for chunk in iter(child.stdout.readline, b""):
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
