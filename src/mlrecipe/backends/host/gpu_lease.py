"""A machine-wide lease on GPUs, so that two local releases never run on the same GPU.

One lock file per GPU (named by its UUID) in a directory every release on this machine shares. A step
takes an exclusive ``flock`` on each of its GPUs before it starts and hands the open files to its node
processes; the kernel drops the locks when the last of those processes ends, however it ends (``kill -9``
included), so a lease never outlives its holder. A JSON file beside each lock says who holds it.

Every backend that runs processes on this machine takes it: the local backend's steps and SageMaker local mode's
training jobs, so two steps of one release (or of two releases) never get the same GPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from mlrecipe.backends.host.devices import Gpu

#: The lease directory unless a backend option names another; ``MLRECIPE_GPU_LEASE_DIR`` overrides it for every
#: backend of the process at once (the local backend's ``gpu_lease_dir`` and SageMaker local mode alike).
DEFAULT_LEASE_DIR = Path("/tmp/mlrecipe-gpu-leases")
LEASE_DIR_VAR = "MLRECIPE_GPU_LEASE_DIR"


def default_lease_dir() -> Path:
    """The machine-wide lease directory: ``$MLRECIPE_GPU_LEASE_DIR``, else ``/tmp/mlrecipe-gpu-leases``."""
    value = os.environ.get(LEASE_DIR_VAR)
    return Path(value).expanduser() if value else DEFAULT_LEASE_DIR


@dataclass(frozen=True)
class Holder:
    """Who holds a GPU: release, step, the CLI's pid, since when (epoch seconds)."""

    release: str
    step: str
    pid: int
    since: float

    def describe(self) -> str:
        return f"release {self.release} step {self.step} (pid {self.pid}, for {time.time() - self.since:.0f} s)"


def _lock_path(directory: Path, gpu: Gpu) -> Path:
    return directory / f"{gpu.uuid}.lock"


def _holder(directory: Path, gpu: Gpu) -> Holder | None:
    try:
        data = json.loads((directory / f"{gpu.uuid}.json").read_text(encoding="utf-8"))
        return Holder(str(data["release"]), str(data["step"]), int(data["pid"]), float(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _open_lock(directory: Path, gpu: Gpu) -> int:
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            directory.chmod(0o1777)  # shared by every user of the machine, like /tmp
    fd = os.open(_lock_path(directory, gpu), os.O_RDWR | os.O_CREAT, 0o666)
    os.set_inheritable(fd, False)
    return fd


def is_free(directory: Path, gpu: Gpu) -> bool:
    """Whether nobody holds ``gpu`` right now (a probe: takes and drops the lock)."""
    try:
        fd = _open_lock(directory, gpu)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class GpuLease:
    """The exclusive hold of one step on its GPUs; see the module docstring."""

    def __init__(self, directory: Path, gpus: tuple[Gpu, ...], release: str, step: str) -> None:
        self.directory = directory
        self.gpus = gpus
        self.release = release
        self.step = step
        self._fds: list[int] = []

    @property
    def fds(self) -> list[int]:
        """The lock files to hand to the step's processes (``Popen(pass_fds=...)``)."""
        return list(self._fds)

    def acquire(self) -> list[tuple[Gpu, Holder | None]]:
        """Take every GPU at once, or none: the busy GPUs and their holders (empty when the lease is held)."""
        if self._fds:
            return []
        busy: list[tuple[Gpu, Holder | None]] = []
        taken: list[int] = []
        for gpu in self.gpus:
            fd = _open_lock(self.directory, gpu)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken.append(fd)
            except BlockingIOError:
                os.close(fd)
                busy.append((gpu, _holder(self.directory, gpu)))
        if busy:
            for fd in taken:
                os.close(fd)
            return busy
        self._fds = taken
        since = time.time()
        for gpu in self.gpus:
            record = {"release": self.release, "step": self.step, "pid": os.getpid(), "since": since}
            with contextlib.suppress(OSError):
                (self.directory / f"{gpu.uuid}.json").write_text(json.dumps(record), encoding="utf-8")
        return []

    def close(self) -> None:
        """Drop this process's hold (the step's processes keep theirs until they end)."""
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []


def busy_message(busy: list[tuple[Gpu, Holder | None]]) -> str:
    """``GPU 0 (NVIDIA H100) held by release r step s (pid 12, for 30 s)``, for every busy GPU."""
    return "; ".join(f"{gpu.describe()} held by {holder.describe() if holder else 'another process'}"
                     for gpu, holder in busy)
