"""One driver per release: an exclusive lock on a file in the release's directory, held for the whole run.

``run``, ``install`` and ``resume`` hold it from before they read the release's record until they exit; a second
driver of the same release is refused at once (:class:`~mlrecipe.errors.ReleaseBusyError`, exit 2) with the
process id of the first, which the holder writes into the lock file. The lock is ``flock`` on a descriptor that no
child inherits (a server step outlives its driver without holding it) and that the kernel lets go of when the
driver dies, even by ``kill -9``. Taking it again in the process that holds it is allowed (``resume`` holds it
around the runner, which takes it too).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from mlrecipe.errors import ReleaseBusyError
from mlrecipe.runner.state import check_no_links

LOCK_FILE = ".driver.lock"
HOLDER_WAIT_SECONDS = 1.0  #: how long a refused driver waits for the holder to have written its pid

_held: dict[str, tuple[int, int]] = {}  #: lock file -> (descriptor, depth) of the locks this process holds


def _holder(fd: int) -> str:
    deadline = time.monotonic() + HOLDER_WAIT_SECONDS
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit() or time.monotonic() > deadline:
            return f"process {text}" if text.isdigit() else "another process"
        time.sleep(0.05)


@contextlib.contextmanager
def driving(directory: Path, address: str) -> Iterator[None]:
    """Hold the driver lock of the release in ``directory`` (``address`` names it in the refusal)."""
    path = directory / LOCK_FILE
    key = os.path.realpath(path)
    if key in _held:
        fd, depth = _held[key]
        _held[key] = (fd, depth + 1)
        try:
            yield
        finally:
            _held[key] = (fd, _held[key][1] - 1)
        return
    check_no_links(path)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise ReleaseBusyError(f"release {address} is being run by {holder}; wait for it to end, or stop it with "
                               f"'mlrecipe uninstall {address}'") from None
    with contextlib.suppress(OSError):  # a full disk: the lock holds, only the pid is not told
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = (fd, 1)
    try:
        yield
    finally:
        del _held[key]
        os.close(fd)
