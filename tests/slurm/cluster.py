"""A real single-machine Slurm cluster for tests and benchmarks: munged, slurmctld and two slurmd.

Everything lives in a temporary directory (slurm.conf, state, spool, logs); the controller and the
two "nodes" (``n1``, ``n2``, both on 127.0.0.1) listen on ports away from Slurm's defaults. The
recipe is the one measured in ENVIRONMENT.md (root, no systemd, proctrack/linuxproc, task/none).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CTLD_PORT = 16817
NODE_PORTS = (17001, 17002)
NODES = ("n1", "n2")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel")
LOCK_PATH = Path("/tmp/mlrecipe-slurm-tests.lock")
LOCK_WAIT = 1800.0


class ClusterError(RuntimeError):
    """The test cluster could not start; the message says why (with the daemons' logs)."""


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def slurm_conf(root: Path, host: str) -> str:
    lo, hi = NODE_PORTS
    return f"""\
ClusterName=mlrecipe-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=900
KillWait=5
InactiveLimit=0
SlurmdTimeout=30
MessageTimeout=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
NodeName=n[1-2] NodeHostname={host} NodeAddr=127.0.0.1 Port=[{lo}-{hi}] CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
"""


def _munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=5, check=True).stdout
        subprocess.run(["unmunge"], input=cred, capture_output=True, timeout=5, check=True)
        return True
    except (OSError, subprocess.SubprocessError):
        return False


@dataclass
class Cluster:
    """A started cluster; ``env`` points the Slurm client tools at it."""

    root: Path
    conf: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)
    munged: subprocess.Popen[bytes] | None = None
    lock_fd: int | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.env}
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=timeout, check=False)

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
        return dict(zip(out[::2], out[1::2], strict=False))

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job, stop the daemons this cluster started, remove its directory."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--user=root", timeout=10)
        for proc in reversed(self.started):
            _terminate(proc)
        if self.munged is not None:
            _terminate(self.munged)
        shutil.rmtree(self.root, ignore_errors=True)
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the flock (our own open file description)
            self.lock_fd = None


def _inherited_lock_fd() -> int | None:
    """An fd on LOCK_PATH inherited from a parent (``flock LOCK_PATH pytest ...``), if any."""
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{name}") == str(LOCK_PATH):
                    return int(name)
    return None


def _take_lock(timeout: float = LOCK_WAIT) -> int | None:
    """Hold an exclusive flock on LOCK_PATH; return the fd to close on stop (None: a parent holds it).

    Under ``flock LOCK_PATH pytest ...`` the parent's lock arrives as an inherited fd: locking that
    same open file description succeeds at once and stays the parent's to release. Otherwise the
    lock is taken on a new descriptor, waiting (polling, at most ``timeout``) for whoever holds it.
    """
    inherited = _inherited_lock_fd()
    if inherited is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(inherited, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return None
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise ClusterError(f"another test Slurm cluster held {LOCK_PATH} for {timeout:.0f}s") from None
            time.sleep(0.5)


def _terminate(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM one daemon we started, SIGKILL it after ``grace``, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _daemon(argv: list[str], env: dict[str, str] | None = None, user: str | None = None) -> subprocess.Popen[bytes]:
    """Start a daemon in the foreground as our own child (so that it can be stopped and reaped)."""
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, user=user, group=user,
                            extra_groups=[] if user else None)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the daemons do: TIME_WAIT is no conflict
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def start_cluster(timeout: float = 60.0) -> Cluster:
    """Start munged (if not already running), slurmctld and two slurmd; wait until both nodes are idle.

    The cluster listens on fixed ports, so two test processes on one machine must never run it at
    once: for its whole lifetime it holds an exclusive ``fcntl.flock`` on LOCK_PATH
    (/tmp/mlrecipe-slurm-tests.lock), taken before anything starts (waiting for another holder) and
    released by ``Cluster.stop``. A lock inherited from ``flock LOCK_PATH pytest ...`` counts as held.
    """
    if os.geteuid() != 0:
        raise ClusterError("the test Slurm cluster needs root (slurmd runs as root here)")
    missing = missing_tools()
    if missing:
        raise ClusterError(f"missing {', '.join(missing)}: apt-get install slurm-wlm munge (make system-deps)")
    lock_fd = _take_lock()
    try:
        return _start_locked(timeout, lock_fd)
    except BaseException:
        if lock_fd is not None:
            os.close(lock_fd)
        raise


def _start_locked(timeout: float, lock_fd: int | None) -> Cluster:
    busy = [p for p in (CTLD_PORT, *NODE_PORTS) if not _port_free(p)]
    if busy:
        raise ClusterError(f"ports {busy} are in use (another test cluster running?)")
    host = socket.gethostname().split(".")[0]
    root = Path(tempfile.mkdtemp(prefix="mlrecipe-slurm-"))
    root.chmod(0o755)
    for sub in ("state", "spool/n1", "spool/n2"):
        (root / sub).mkdir(parents=True)
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host))
    cluster = Cluster(root, conf)
    try:
        if not _munge_works():
            MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
            shutil.chown(MUNGE_SOCKET.parent, "munge", "munge")
            cluster.munged = _daemon(["munged", "--foreground", "--force"], user="munge")
            _wait(_munge_works, 15, "munged to answer", cluster)
        env = {**os.environ, "SLURM_CONF": str(conf)}
        cluster.started.append(_daemon(["slurmctld", "-D", "-i", "-f", str(conf)], env))
        _wait(lambda: cluster.run("scontrol", "ping").returncode == 0
              and "UP" in cluster.run("scontrol", "ping").stdout, timeout, "slurmctld to answer", cluster)
        for name in NODES:
            cluster.started.append(_daemon(["slurmd", "-D", "-N", name, "-f", str(conf)], env))
        _wait(lambda: sorted(cluster.node_states().values()) == ["idle", "idle"], timeout,
              "both nodes to be idle", cluster)
    except BaseException:
        cluster.stop()
        raise
    cluster.lock_fd = lock_fd
    return cluster


def _wait(predicate, timeout: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(subprocess.SubprocessError):
            if predicate():
                return
        time.sleep(0.1)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{cluster.logs()}")
