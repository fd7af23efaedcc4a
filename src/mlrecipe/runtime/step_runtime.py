#!/usr/bin/env python3
"""The mlrecipe step runtime: the one program that runs inside every node of a step.

It runs unchanged as a local process, a Slurm task and a Kubernetes container (the charts
deliver this very file in a ConfigMap), and uses the Python standard library only.

Usage: ``python3 step_runtime.py STEP_JSON``

``STEP_JSON`` (the *step program*) holds::

    {"version": 1, "release": str, "namespace": str, "step": str, "chart": str,
     "git": {"repo_url": str, "branch": str|null, "commit": str|null} | null,
     "inline_script": [str], "pre_script": [str], "command": [str], "args": [str],
     "post_script": [str], "watchdog": {"hang_timeout": str|number, "on_hang": str, "max_restarts": int},
     "network_check": {"min_ratio": number|null, "node_type": str|null, "efa": bool}}

(``watchdog`` and ``network_check`` only when the recipe sets them.)

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

With a ``"watchdog": {"hang_timeout": "10m", "on_hang": "fail"|"restart", "max_restarts": 1}`` block in the
program (absent: none of this happens), the runtime also watches for a hang: no new output of its node, no new
line in ``$MLRECIPE_METRICS_FILE`` and no other node's activity for ``hang_timeout``. It then dumps the Python stacks
of every thread of every Python process of its node into the step's log directory, tells the other nodes (through
that directory, which they share on every backend but a Kubernetes step without a shared volume), stops the command
and exits with :data:`HANG_STATUS`, or runs the command again (``on_hang: restart``). See :class:`Watchdog`.

With ``network_check`` (a multi-node step), every node first runs a timed all-reduce of 1, 8 and 64 MiB across the
step's nodes in a child ``python3`` (one process per node; NCCL on a GPU, gloo on CPU; rendezvous at
``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` + :data:`FABRIC_PORT_OFFSET`), with ``NCCL_DEBUG=INFO`` for itself only,
and writes the transport and bus bandwidth to ``fabric-node-<rank>.json`` in the step's log directory. Without torch
in the image the check is skipped; an EFA step whose image lacks libfabric's efa provider or the aws-ofi-nccl plugin,
or a bandwidth below ``min_ratio`` of the node type's baseline, fails the node (exit 1) before the command.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
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
from dataclasses import dataclass
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


# --- The watchdog: hang detection (the program's "watchdog" block) -----------------------------------------------

#: The exit status of a node whose command the watchdog stopped after a hang (as ``timeout`` exits).
HANG_STATUS = 124
HANG_MARKER = "hang.json"
HANG_REASON = "reason.txt"
NOT_IN_COLLECTIVE = "is not in a collective"
#: faulthandler's dump signal in the step's Python processes: a real-time one, which programs rarely use. Only the
#: processes that registered it (and said so in the watchdog's ``pids`` directory) are ever sent it.
STACK_SIGNAL = signal.SIGRTMIN + 7
STACK_SIGNAL_VAR = "MLRECIPE_WATCHDOG_SIGNAL"
GATHER_SECONDS = float(os.environ.get("MLRECIPE_WATCHDOG_GATHER", "10"))
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object) -> float:
    """Seconds in a duration: a number of seconds, or a string of number-unit parts (``90s``, ``10m``, ``1h30m``;
    units ms, s, m, h, d); ``ValueError`` when it is none, or not above zero."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 90s, 10m or 1h30m")
    if isinstance(value, int | float) or (isinstance(value, str) and re.fullmatch(r"\s*(\d+(\.\d*)?|\.\d+)\s*", value)):
        seconds = float(value)  # type: ignore[arg-type]
    elif isinstance(value, str) and value.strip() and _DURATION_PART.sub("", value.strip()) == "":
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value.strip()))
    else:
        shown = str(value) if len(str(value)) <= 40 else f"{str(value)[:37]}..."
        raise ValueError(f"cannot read duration {shown!r}: give seconds or a duration such as 90s, 10m or 1h30m")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError("must be a duration above zero, such as 90s, 10m or 1h30m")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` the way recipes write it: ``10m``, ``1h30m``, ``3s``, ``2.5s``."""
    if seconds != int(seconds) or seconds < 60:
        return f"{seconds:g}s"
    out, rest = "", int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out, rest = out + f"{rest // size}{unit}", rest % size
    return out


SITECUSTOMIZE = r'''"""Written by the mlrecipe step runtime's watchdog: registers faulthandler so that the watchdog
can dump this process's Python stacks on a hang, then runs the sitecustomize this one shadows, if there is one."""


def _mlrecipe_register():
    import faulthandler
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    signum = int(os.environ.get("MLRECIPE_WATCHDOG_SIGNAL") or 0)
    if not signum:
        return
    keep = []

    def register():
        pid = os.getpid()
        try:
            with open(f"/proc/{pid}/stat") as fh:
                start = fh.read().rsplit(")", 1)[1].split()[19]
            out = open(os.path.join(here, "stacks", f"{pid}.txt"), "w")
            faulthandler.register(signum, file=out, all_threads=True, chain=False)
            keep.append(out)
            with open(os.path.join(here, "pids", str(pid)), "w") as fh:
                fh.write(start)
        except Exception:
            pass

    register()
    os.register_at_fork(after_in_child=register)


def _mlrecipe_chain():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


try:
    _mlrecipe_register()
except Exception:
    pass
_mlrecipe_chain()
'''

#: Frames (function names in ``torch/distributed`` files) that mean a rank waits for its peers.
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "reduce_scatter", "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "reduce", "gather", "scatter",
    "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "wait", "batch_isend_irecv",
})
_FAULTHANDLER_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>\S+)')
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>\S+) \((?P<file>[^)]*?):(?P<line>\d+)\)")


@dataclass(frozen=True)
class WatchdogSettings:
    """The program's ``watchdog`` block: seconds without progress that make a hang, and what then happens."""

    hang_timeout: float
    on_hang: str = "fail"
    max_restarts: int = 1

    @classmethod
    def from_program(cls, program: dict) -> WatchdogSettings | None:
        """The block of ``program``, ``None`` when it has none (or one without ``hang_timeout``)."""
        block = program.get("watchdog") or {}
        if not isinstance(block, dict) or block.get("hang_timeout") in (None, ""):
            return None
        restarts = block.get("max_restarts")
        return cls(parse_duration(block["hang_timeout"]), str(block.get("on_hang") or "fail"),
                   1 if restarts in (None, "") else int(restarts))


def _proc_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _proc_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            items = fh.read().split(b"\0")
    except OSError:
        return {}
    pairs = (i.decode("utf-8", "replace").split("=", 1) for i in items if b"=" in i)
    return {k: v for k, v in pairs}


def _proc_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return " ".join(a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a)
    except OSError:
        return ""


def _is_python(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False


def descendants(root: int) -> list[int]:
    """The pids of every process below ``root`` (ranks in sessions of their own too), from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def parse_stacks(text: str) -> list[list[tuple[str, int, str]]]:
    """The threads of a faulthandler or py-spy dump, each a list of (file, line, function), innermost first."""
    threads: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            threads.append([])
            continue
        m = _FAULTHANDLER_FRAME.match(line) or _PYSPY_FRAME.match(line)
        if m and threads:
            threads[-1].append((m["file"], int(m["line"]), m["func"]))
    return [t for t in threads if t]


def in_collective(threads: list[list[tuple[str, int, str]]]) -> bool:
    """Whether a thread waits in a ``torch.distributed`` collective (or a wait on one)."""
    return any("torch/distributed" in f and fn in COLLECTIVES for t in threads for f, _, fn in t)


def innermost(threads: list[list[tuple[str, int, str]]]) -> str:
    """Where the main thread is (the one whose outermost frame is a module's): ``function (file:line)``."""
    main = next((t for t in threads if t[-1][2] == "<module>"), threads[-1])
    file, line, func = main[0]
    return f"{func} ({file}:{line})"


def _header(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        fields[key] = value
    return fields


def hang_culprit(stack_dir: str, nnodes: int = 0) -> str:
    """The first rank (by rank, node, pid) whose stacks are not inside a collective, with where it is; or what
    the stacks in ``stack_dir`` say instead (naming the nodes of ``nnodes`` whose stacks are not there)."""
    procs = []
    for name in sorted(os.listdir(stack_dir)) if os.path.isdir(stack_dir) else []:
        if not (name.startswith("node-") and name.endswith(".txt")):
            continue
        with open(os.path.join(stack_dir, name), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        fields, threads = _header(text), parse_stacks(text)
        if threads:
            procs.append((fields, threads))
    if not procs:
        return "no Python stacks could be taken"
    ranked = [p for p in procs if p[0].get("rank", "-") != "-"]
    candidates = ranked or procs

    def order(p: tuple[dict[str, str], list]) -> list[int]:
        return [int(p[0][k]) if p[0].get(k, "-").isdigit() else 1 << 30 for k in ("rank", "node", "pid")]

    for fields, threads in sorted(candidates, key=order):
        if not in_collective(threads):
            who = (f"rank {fields['rank']} (node {fields.get('node')}, pid {fields.get('pid')})"
                   if fields.get("rank", "-") != "-" else f"node {fields.get('node')} pid {fields.get('pid')}")
            return f"{who} {NOT_IN_COLLECTIVE}: in {innermost(threads)}"
    missing = sorted(set(range(nnodes)) - {int(f["node"]) for f, _ in procs if f.get("node", "").isdigit()})
    if missing:
        return (f"every rank here is inside a collective; the stacks of node(s) {', '.join(map(str, missing))} are "
                "not in this directory (see their own logs)")
    return "every rank's stack is inside a collective (a peer may have died, or the fabric stalls)"


def read_hang_reason(log_dir: str | os.PathLike[str]) -> str | None:
    """The reason the watchdog gave for the latest hang of the step whose log directory is ``log_dir``."""
    try:
        with open(os.path.join(log_dir, "watchdog", HANG_MARKER), encoding="utf-8") as fh:
            marker = json.load(fh)
        with open(os.path.join(log_dir, str(marker["dir"]), HANG_REASON), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def step_log_dir(program: dict, env: dict[str, str]) -> str | None:
    """Where the watchdog writes: ``$MLRECIPE_LOG_DIR``; else the metrics file's directory, which the step's nodes
    share (local, Slurm, a Kubernetes shared volume); else SageMaker's ``$SM_OUTPUT_DATA_DIR`` (uploaded with the
    job's output); else ``$HOME/logs/<step>``."""
    if env.get("MLRECIPE_LOG_DIR"):
        return env["MLRECIPE_LOG_DIR"]
    if env.get("MLRECIPE_METRICS_FILE"):
        return os.path.dirname(os.path.abspath(env["MLRECIPE_METRICS_FILE"]))
    if env.get("SM_OUTPUT_DATA_DIR") and sagemaker_hosts(env) is not None:
        return env["SM_OUTPUT_DATA_DIR"]
    path = _log_path(program, env)
    return os.path.dirname(path) if path else None


class Watchdog:
    """Hang detection for one node: progress, the decision, the stacks, the other nodes.

    Progress is new output of this node's command, a change of ``$MLRECIPE_METRICS_FILE`` or of another node's
    activity file (``<log dir>/watchdog/activity-node-<rank>``, touched at most once a second while its node
    prints). A node that sees none for ``hang_timeout`` decides: the first to create ``<log dir>/watchdog/claim-<n>``
    (``n``: the attempt) names a new ``hang-<time>-node<rank>`` directory in it (and in ``hang.json``, the latest
    hang, which the backends read); every node that sees the claim (or decides itself) dumps its stacks there, marks
    itself done, waits up to :data:`GATHER_SECONDS` for the others, and writes the reason.
    """

    def __init__(self, settings: WatchdogSettings, env: dict[str, str], log_dir: str | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self.node = int(env.get("PET_NODE_RANK", "0") or 0)
        nnodes = (env.get("PET_NNODES") or "1").split(":")[-1]
        self.nnodes = int(nnodes) if nnodes.isdigit() else 1
        self.metrics = env.get("MLRECIPE_METRICS_FILE") or None
        self.log_dir = log_dir
        #: No directory the backend keeps (a pod without a shared volume): the stacks go to the node's output too.
        self.echo_stacks = not (env.get("MLRECIPE_LOG_DIR") or self.metrics)
        self.written: list[str] = []
        self.shared = os.path.join(log_dir, "watchdog") if log_dir else None
        self.private = tempfile.mkdtemp(prefix="mlrecipe-wd-", dir=env.get("TMPDIR") or None)
        for sub in ("stacks", "pids"):
            os.mkdir(os.path.join(self.private, sub))
        with open(os.path.join(self.private, "sitecustomize.py"), "w", encoding="utf-8") as fh:
            fh.write(SITECUSTOMIZE)
        if self.shared:
            with contextlib.suppress(OSError):
                os.makedirs(self.shared, exist_ok=True)
        self.attempt = 0
        self.last_progress = clock()
        self._last_touch = 0.0
        self._seen: dict[str, tuple[int, int]] = {}

    def child_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` for the command: the watchdog's sitecustomize first on ``PYTHONPATH``, its dump signal."""
        path = env.get("PYTHONPATH")
        return {**env, "PYTHONPATH": f"{self.private}:{path}" if path else self.private,
                STACK_SIGNAL_VAR: str(int(STACK_SIGNAL))}

    def start_attempt(self) -> None:
        """A new run of the command: the clock starts again. The first run removes the claims of earlier runs
        (a node decides a hang only after ``hang_timeout``, long after every node has started)."""
        self.last_progress = self.clock()
        self._scan()
        if self.attempt == 0 and self.shared:
            with contextlib.suppress(OSError):
                for name in os.listdir(self.shared):
                    if name.startswith("claim-"):
                        with contextlib.suppress(OSError):
                            os.unlink(os.path.join(self.shared, name))
        for sub in ("stacks", "pids"):
            for name in os.listdir(os.path.join(self.private, sub)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.private, sub, name))

    @property
    def _claim(self) -> str | None:
        """The file whose creation decides this attempt's hang, once for every node."""
        return os.path.join(self.shared, f"claim-{self.attempt}") if self.shared else None

    @staticmethod
    def _stat(path: str | None) -> tuple[int, int] | None:
        try:
            st = os.stat(path) if path else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size) if st else None

    def saw_output(self) -> None:
        """This node's command printed: progress, and (at most once a second) this node's activity file."""
        now = self.clock()
        self.last_progress = now
        if self.shared and now - self._last_touch >= 1.0:
            self._last_touch = now
            path = os.path.join(self.shared, f"activity-node-{self.node}")
            with contextlib.suppress(OSError):
                with open(path, "a", encoding="utf-8"):
                    pass
                os.utime(path)

    def _scan(self) -> bool:
        paths = [self.metrics] if self.metrics else []
        if self.shared:
            with contextlib.suppress(OSError):
                paths += [os.path.join(self.shared, n) for n in os.listdir(self.shared) if n.startswith("activity-")]
        changed = False
        for path in paths:
            now = self._stat(path)
            if now is not None and self._seen.get(path) != now:
                changed = True
                self._seen[path] = now
        return changed

    def check(self) -> str | None:
        """``"told"`` when another node decided a hang, ``"decided"`` when this one does now, else ``None``."""
        if self._scan():
            self.last_progress = self.clock()
        if self._claim is not None and os.path.exists(self._claim):
            return "told"
        if self.clock() - self.last_progress >= self.settings.hang_timeout:
            return "decided"
        return None

    def _hang_dir(self) -> str:
        """The hang's directory name: this node's new one if it creates the claim, else the one the claim names."""
        name = time.strftime("hang-%Y%m%dT%H%M%SZ", time.gmtime()) + f"-node{self.node}"
        if self._claim is None:
            return name
        record = json.dumps({"dir": name, "node": self.node, "attempt": self.attempt, "time": time.time()})
        try:
            fd = os.open(self._claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:  # the claim's creator writes it right after creating it
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError), open(self._claim) as fh:
                    return str(json.load(fh)["dir"])
                time.sleep(0.1)
            return name
        except OSError:
            return name
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(record)
        with contextlib.suppress(OSError):
            tmp = os.path.join(self.shared or "", f"{HANG_MARKER}.{self.node}.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(record)
            os.replace(tmp, os.path.join(self.shared or "", HANG_MARKER))
        return name

    def on_hang(self, how: str, root_pid: int) -> tuple[str, str]:
        """Dump this node's stacks (the processes below ``root_pid``), gather the other nodes', and return the
        hang's directory and reason."""
        name = self._hang_dir()
        base = self.log_dir or self.private
        stack_dir = os.path.join(base, name)
        with contextlib.suppress(OSError):
            os.makedirs(stack_dir, exist_ok=True)
        self.written = self.dump_stacks(stack_dir, root_pid)
        with contextlib.suppress(OSError), open(os.path.join(stack_dir, f"node-{self.node}.done"), "w"):
            pass
        deadline = time.monotonic() + GATHER_SECONDS
        while time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(stack_dir, f"node-{r}.done")) for r in range(self.nnodes)):
            time.sleep(0.2)
        reason = (f"hang: no progress for {format_duration(self.settings.hang_timeout)}; stacks in {stack_dir}; "
                  f"{hang_culprit(stack_dir, self.nnodes)}")
        with contextlib.suppress(OSError):
            tmp = os.path.join(stack_dir, f"{HANG_REASON}.{self.node}.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(reason + "\n")
            os.replace(tmp, os.path.join(stack_dir, HANG_REASON))
        return stack_dir, reason

    def registered(self) -> list[int]:
        """The live processes that registered the dump signal (their start time checked: no reused pid)."""
        pids = []
        folder = os.path.join(self.private, "pids")
        for name in os.listdir(folder):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    start = fh.read().strip()
            except OSError:
                continue
            if name.isdigit() and start and _proc_start(int(name)) == start:
                pids.append(int(name))
        return sorted(pids)

    def dump_stacks(self, stack_dir: str, root_pid: int) -> list[str]:
        """Write the stacks of every Python process of this node below ``root_pid`` into ``stack_dir``
        (``node-<rank>-pid-<pid>.txt``): faulthandler in those that registered it, py-spy for the others when
        it is installed. Returns the files written."""
        below = set(descendants(root_pid))
        pids = [p for p in self.registered() if p in below]
        files = {p: os.path.join(self.private, "stacks", f"{p}.txt") for p in pids}
        sizes = {p: self._stat(f) for p, f in files.items()}
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, STACK_SIGNAL)
        deadline = time.monotonic() + 5.0
        waiting = set(pids)
        while waiting and time.monotonic() < deadline:
            time.sleep(0.2)
            waiting = {p for p in waiting if self._stat(files[p]) == sizes[p]}
        time.sleep(0.2)  # a dump still being written settles
        written = []
        for pid in pids:
            with contextlib.suppress(OSError), open(files[pid], encoding="utf-8", errors="replace") as fh:
                written.append(self._write_stack(stack_dir, pid, "faulthandler", fh.read()))
        spy = shutil.which("py-spy")
        others = [p for p in sorted(below) if p not in pids and _is_python(p)] if spy else []
        for pid in others:
            try:
                out = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20)
                text = out.stdout if out.returncode == 0 else f"py-spy failed: {out.stderr.strip()}\n"
            except (OSError, subprocess.TimeoutExpired) as exc:
                text = f"py-spy failed: {exc}\n"
            written.append(self._write_stack(stack_dir, pid, "py-spy", text))
        return [w for w in written if w]

    def _write_stack(self, stack_dir: str, pid: int, method: str, text: str) -> str:
        env = _proc_environ(pid)
        header = (f"# node: {self.node}\n# pid: {pid}\n# rank: {env.get('RANK', '-')}\n"
                  f"# local_rank: {env.get('LOCAL_RANK', '-')}\n# method: {method}\n"
                  f"# command: {_proc_cmdline(pid)}\n")
        path = os.path.join(stack_dir, f"node-{self.node}-pid-{pid}.txt")
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(header + text)
        except OSError:
            return ""
        return path

    def close(self) -> None:
        shutil.rmtree(self.private, ignore_errors=True)



def _stop_tree(child: subprocess.Popen, pids: list[int], grace: float) -> None:
    """Stop the command's process group and the processes below it that left it (ranks in sessions of their own)."""
    starts = {p: _proc_start(p) for p in pids}
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)
        for pid, start in starts.items():
            if start is not None and _proc_start(pid) == start:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
        if signum == signal.SIGTERM:
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (child.poll() is None or any(
                    s is not None and _proc_start(p) == s for p, s in starts.items())):
                time.sleep(0.1)


def _tee(data: bytes, log: BinaryIO | None) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    if log is not None:
        log.write(data)


def _sagemaker_failure(env: dict[str, str], reason: str) -> None:
    """In a SageMaker training container, a reason that names the stuck rank becomes the job's ``FailureReason``
    (``output/failure``). SageMaker's hosts share no directory, so each host reads only its own stacks: the host
    of the stuck rank is the one that can name it (the others' logs end with their own reason)."""
    if sagemaker_hosts(env) is None or NOT_IN_COLLECTIVE not in reason:
        return
    path = os.path.join(env.get("SM_OUTPUT_DIR") or "/opt/ml/output", "failure")
    with contextlib.suppress(OSError):
        if not (os.path.isfile(path) and os.path.getsize(path)):
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(reason + "\n")


def _termination_message(env: dict[str, str], reason: str) -> None:
    """In a Kubernetes container, ``reason`` becomes the container's termination message (``kubectl describe``,
    ``status.containerStatuses[].state.terminated.message``; at most 4096 bytes are kept)."""
    path = "/dev/termination-log"
    if env.get("KUBERNETES_SERVICE_HOST") and os.path.exists(path):
        with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as fh:
            fh.write(reason[:4000])


def _run_watched(program: dict, env: dict[str, str], log: BinaryIO | None, settings: WatchdogSettings) -> int:
    """:func:`_run_script` under the watchdog: on a hang, stacks, then :data:`HANG_STATUS` or a restart."""
    watchdog = Watchdog(settings, env, step_log_dir(program, env))

    def say(text: str) -> None:
        _tee(f"[mlrecipe] {text}\n".encode(), log)

    try:
        while True:
            status, reason = _watched_attempt(program, watchdog, watchdog.child_env(env), log)
            if reason is None:
                return status
            say(reason)
            if settings.on_hang != "restart" or watchdog.attempt >= settings.max_restarts:
                _sagemaker_failure(env, reason)
                _termination_message(env, reason)
                return HANG_STATUS
            watchdog.attempt += 1
            say(f"watchdog: restarting the command after a hang (restart {watchdog.attempt} of "
                f"{settings.max_restarts})")
    finally:
        watchdog.close()
        if log is not None:
            log.close()


def _watched_attempt(program: dict, watchdog: Watchdog, env: dict[str, str],
                     log: BinaryIO | None) -> tuple[int, str | None]:
    """One run of the command under ``watchdog``: its status, and the hang's reason if it hung."""
    watchdog.start_attempt()
    script = build_script(program)
    cwd = env["HOME"] if env.get("HOME") and os.path.isdir(env["HOME"]) else None
    child = subprocess.Popen(["bash", "-c", script, "mlrecipe-step"], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                             preexec_fn=_set_parent_death_signal)
    forward = _Forwarder(child)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    hang: list[str] = []
    done = threading.Event()
    interval = min(1.0, watchdog.settings.hang_timeout / 4)

    def watch() -> None:
        while not done.wait(interval):
            how = watchdog.check()
            if how is None or forward.stopping:
                continue
            pids = descendants(child.pid)
            _, reason = watchdog.on_hang(how, child.pid)
            for path in watchdog.written if watchdog.echo_stacks else []:
                with contextlib.suppress(OSError), open(path, "rb") as fh:
                    _tee(f"[mlrecipe] stacks of {os.path.basename(path)}:\n".encode() + fh.read(), log)
            hang.append(reason)
            _stop_tree(child, pids + descendants(child.pid), min(GRACE_SECONDS, 5.0))
            return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert child.stdout is not None
    fd = child.stdout.fileno()
    while chunk := os.read(fd, 65536):
        watchdog.saw_output()
        _tee(chunk, log)
    status = child.wait()
    done.set()
    watcher.join()
    if forward.stopping:
        forward._signal(signal.SIGKILL)
    if hang:
        return HANG_STATUS, hang[0]
    return (128 - status if status < 0 else status), None


# --- The fabric check: a measured all-reduce before the command (the program's "network_check" block) ------------

#: NCCL's own log lines that say which transport it chose (also read by :mod:`mlrecipe.nccl_network`: one source).
NCCL_SOCKETS = re.compile(r"NET/Socket|Using network Socket")
NCCL_EFA = re.compile(r"selected provider is efa|NET/OFI.*efa|NET/AWS Libfabric", re.IGNORECASE)
NCCL_IB = re.compile(r"NET/IB|Using network IB")
FABRIC_FILE = "fabric-node-{rank}.json"
FABRIC_SIZES = (1 << 20, 8 << 20, 64 << 20)
#: The check's rendezvous port: PET_MASTER_PORT plus this (the launcher's own port stays free for the command).
FABRIC_PORT_OFFSET = 17
#: Published per-node EFA bandwidth, Gbit/s (docs/operating.md cites the sources); keys are instance-type prefixes.
FABRIC_BASELINE_GBPS = {
    "p4d.": 400.0, "p4de.": 400.0, "p5.": 3200.0, "p5e.": 3200.0, "p5en.": 3200.0,
    "g5.48xlarge": 100.0, "g6.48xlarge": 100.0, "trn1.32xlarge": 800.0, "trn1n.32xlarge": 1600.0,
}
FABRIC_FIX = ("fix: give the pods their EFA devices (the EFA device plugin, vpc.amazonaws.com/efa requests), a "
              "security group that allows all traffic within itself, FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1, "
              "NCCL_SOCKET_IFNAME=^lo,docker, and the aws-ofi-nccl plugin (libnccl-net*.so) on LD_LIBRARY_PATH")
PLUGIN_DIRS = ("/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/amazon/efa/lib",
               "/opt/amazon/efa/lib64", "/opt/aws-ofi-nccl/lib", "/usr/local/lib")
FABRIC_SCRIPT = r'''"""Written by the mlrecipe step runtime's fabric check: a timed all-reduce across the nodes."""
import json, os, sys, time
try:
    import torch
    import torch.distributed as dist
except ImportError:
    sys.exit(3)
rank, world = int(sys.argv[1]), int(sys.argv[2])
gpu = torch.cuda.is_available()
backend = "nccl" if gpu else "gloo"
if gpu:
    torch.cuda.set_device(0)
dist.init_process_group(backend, init_method=sys.argv[3], rank=rank, world_size=world)
device = "cuda" if gpu else "cpu"
rows = []
for size in [int(s) for s in sys.argv[4].split(",")]:
    x = torch.ones(size // 4, dtype=torch.float32, device=device)
    dist.all_reduce(x)
    iters = 3 if size <= (8 << 20) else 2
    if gpu:
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    if gpu:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iters
    algbw = size / seconds / 1e9
    rows.append({"bytes": size, "seconds": seconds, "algbw_gbs": algbw,
                 "busbw_gbs": algbw * 2 * (world - 1) / world})
dist.destroy_process_group()
print("MLRECIPE_FABRIC " + json.dumps({"backend": backend, "sizes": rows}), flush=True)
'''


@dataclass
class FabricSettings:
    """The program's ``network_check`` block: ``true`` or ``{min_ratio, node_type}``."""

    min_ratio: float | None = None
    node_type: str | None = None
    efa: bool = False

    @classmethod
    def from_program(cls, program: dict) -> FabricSettings | None:
        """The settings, or None when the program asks for no check."""
        block = program.get("network_check")
        if block is None or block is False:
            return None
        if block is True:
            return cls()
        return cls(block.get("min_ratio"), block.get("node_type"), bool(block.get("efa")))


def nccl_transport(log_text: str) -> str:
    """The transport NCCL's INFO lines say it chose: ``efa``, ``ib``, ``socket`` or ``unknown``."""
    if NCCL_EFA.search(log_text):
        return "efa"
    if NCCL_IB.search(log_text):
        return "ib"
    if NCCL_SOCKETS.search(log_text):
        return "socket"
    return "unknown"


def baseline_gbps(node_type: str | None) -> float | None:
    """The published per-node fabric bandwidth (Gbit/s) of ``node_type``, by the longest matching prefix."""
    if not node_type:
        return None
    keys = [k for k in FABRIC_BASELINE_GBPS if node_type.removeprefix("ml.").startswith(k)]
    return FABRIC_BASELINE_GBPS[max(keys, key=len)] if keys else None


def wants_efa(settings: FabricSettings, env: dict[str, str]) -> bool:
    """Whether the node is meant to use EFA: the step requests EFA devices, or ``FI_PROVIDER=efa``."""
    return settings.efa or env.get("FI_PROVIDER", "").lower() == "efa"


def efa_readiness(env: dict[str, str]) -> str | None:
    """Why this image cannot use EFA (no libfabric efa provider, no aws-ofi-nccl plugin), or None when it can."""
    problems = []
    fi_info = shutil.which("fi_info", path=env.get("PATH"))
    if fi_info is None:
        problems.append("fi_info (libfabric) is not on PATH")
    else:
        try:
            probe = subprocess.run([fi_info, "-p", "efa"], env=env, capture_output=True, timeout=20)
            if probe.returncode != 0:
                problems.append("`fi_info -p efa` finds no efa provider")
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"`fi_info -p efa` failed: {exc}")
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d] + list(PLUGIN_DIRS)
    if not any(os.path.isdir(d) and any(n.startswith("libnccl-net") and ".so" in n for n in os.listdir(d))
               for d in dirs):
        problems.append("no aws-ofi-nccl plugin (libnccl-net*.so) on LD_LIBRARY_PATH or under /opt/amazon")
    if not problems:
        return None
    return "EFA is not ready in this image: " + "; ".join(problems) + "; " + FABRIC_FIX


def run_fabric_check(settings: FabricSettings, env: dict[str, str], log_dir: str | None, temp_dir: str,
                     say: Callable[[str], None]) -> tuple[dict | None, str | None]:
    """Run the check on this node: its figures (also written as ``fabric-node-<rank>.json`` in ``log_dir``) and
    the reason to fail the step before its command, if any."""
    if wants_efa(settings, env):
        reason = efa_readiness(env)
        if reason:
            return None, reason
    nnodes = int(env.get("PET_NNODES", "1") or 1)
    rank = int(env.get("PET_NODE_RANK", "0") or 0)
    if nnodes < 2:
        say("fabric check: skipped (a single node)")
        return None, None
    python = sys.executable or shutil.which("python3", path=env.get("PATH"))  # the runtime's own python3
    if not python:
        say("fabric check: skipped (no python3 in the image)")
        return None, None
    script = os.path.join(temp_dir, "mlrecipe_fabric_check.py")
    with open(script, "w", encoding="utf-8") as fh:
        fh.write(FABRIC_SCRIPT)
    port = int(env.get("PET_MASTER_PORT") or DEFAULT_MASTER_PORT) + FABRIC_PORT_OFFSET
    url = f"tcp://{env.get('PET_MASTER_ADDR', '127.0.0.1')}:{port}"
    child_env = {**env, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    start = time.monotonic()
    try:
        done = subprocess.run([python, script, str(rank), str(nnodes), url, ",".join(map(str, FABRIC_SIZES))],
                              env=child_env, capture_output=True, text=True, errors="replace",
                              timeout=float(env.get("MLRECIPE_FABRIC_TIMEOUT", "300")))
    except subprocess.TimeoutExpired:
        return None, f"fabric check: the all-reduce across {nnodes} nodes did not finish; {FABRIC_FIX}"
    if done.returncode == 3:
        say("fabric check: skipped (torch is not installed in the image)")
        return None, None
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("MLRECIPE_FABRIC ")), None)
    if done.returncode != 0 or line is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return None, f"fabric check failed (exit {done.returncode}): {' | '.join(tail)}; {FABRIC_FIX}"
    figures = json.loads(line.split(" ", 1)[1])
    figures.update(node=rank, nnodes=nnodes, seconds=round(time.monotonic() - start, 3),
                   transport=nccl_transport(done.stdout + done.stderr) if figures["backend"] == "nccl" else "gloo")
    best = max(row["busbw_gbs"] for row in figures["sizes"])
    figures["busbw_gbs"] = best
    reason = None
    expected = baseline_gbps(settings.node_type)
    if expected is not None:
        figures.update(node_type=settings.node_type, baseline_gbps=expected, ratio=best * 8 / expected)
    if settings.min_ratio is not None:
        figures["min_ratio"] = settings.min_ratio
        if expected is None:
            say(f"fabric check: no baseline for node type {settings.node_type or '(unknown)'}; min_ratio not applied")
        elif figures["ratio"] < settings.min_ratio:
            reason = (f"fabric check: bus bandwidth {best * 8:.1f} Gbit/s is {figures['ratio']:.3f} of "
                      f"{settings.node_type}'s {expected:.0f} Gbit/s (min_ratio {settings.min_ratio}, transport "
                      f"{figures['transport']}); {FABRIC_FIX}")
    if log_dir:
        with contextlib.suppress(OSError):
            os.makedirs(log_dir, exist_ok=True)
            with open(os.path.join(log_dir, FABRIC_FILE.format(rank=rank)), "w", encoding="utf-8") as fh:
                json.dump(figures, fh, indent=1)
    say(f"fabric check: {figures['transport']}, bus bandwidth " + ", ".join(
        f"{row['bytes'] >> 20} MiB {row['busbw_gbs']:.3f} GB/s" for row in figures["sizes"])
        + f" ({figures['seconds']:.1f} s)")
    return figures, reason


def read_fabric_figures(log_dir: str | os.PathLike[str]) -> list[dict]:
    """The fabric check's figures of every node of the step whose log directory is ``log_dir``."""
    rows = []
    try:
        names = sorted(n for n in os.listdir(log_dir) if n.startswith("fabric-node-") and n.endswith(".json"))
    except OSError:
        return []
    for name in names:
        with contextlib.suppress(OSError, ValueError), open(os.path.join(log_dir, name), encoding="utf-8") as fh:
            rows.append(json.load(fh))
    return rows


# --- Running the step program ------------------------------------------------------------------------------------


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
    watchdog = WatchdogSettings.from_program(program)
    log = _open_log(_log_path(program, env))
    temp_dir = node_temp_dir(env)
    try:
        fabric = FabricSettings.from_program(program)
        if fabric is not None:
            status = _fabric_gate(fabric, program, env, log)
            if status:
                return status
        return _run_watched(program, env, log, watchdog) if watchdog else _run_script(program, env, log)
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _fabric_gate(settings: FabricSettings, program: dict, env: dict[str, str], log: BinaryIO | None) -> int:
    """Run the fabric check before the command: 0 to go on, 1 (with the reason in the node's output) to fail."""
    def say(text: str) -> None:
        _tee(f"[mlrecipe] {text}\n".encode(), log)

    scratch = tempfile.mkdtemp(prefix="mlrecipe-fabric-", dir=env.get("TMPDIR") or None)
    try:
        _, reason = run_fabric_check(settings, env, step_log_dir(program, env), scratch, say)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if reason is None:
        return 0
    say(f"error: {reason}")
    _termination_message(env, reason)
    _sagemaker_failure(env, reason)
    return 1


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
