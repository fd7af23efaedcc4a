"""Mount points that do not exist on this machine (``/fsx``, ``/efs``, ``/etc/mlrecipe``): a bind mount needs its
target to exist, and the containers share this machine's root file system. The harness creates them before the
pods start and removes them, if empty, when no other harness run is using them (a shared lock held for the run)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

STATE = Path("/run/mlrecipe-kubelet")
LOCK = STATE / "lock"
CREATED = STATE / "created"


def _layer_or_mounted(target: str, others: list[str], layer: list[str]) -> bool:
    parents = [*layer, *(o for o in others if o != target)]
    return any(target == p or target.startswith(p.rstrip("/") + "/") for p in parents if p != target) or target in layer


def ensure(targets: list[str], layer: list[str]) -> None:
    """Create the targets (dirs) that are neither under a container's fresh /tmp or /root nor under another mount."""
    for target in targets:
        if _layer_or_mounted(target, targets, layer) or os.path.lexists(target):
            continue
        top = Path(target)
        while not top.parent.exists():
            top = top.parent
        Path(target).mkdir(parents=True, exist_ok=True)
        with open(CREATED, "a", encoding="utf-8") as fh:
            fh.write(f"{top}\n")


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold the shared lock for a harness run; on leaving, the last run removes the empty directories made."""
    STATE.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        try:
            if CREATED.exists():
                for top in sorted(set(CREATED.read_text().split()), key=len, reverse=True):
                    for dirpath, _dirs, _files in sorted(os.walk(top, topdown=False), key=lambda w: -len(w[0])):
                        with contextlib.suppress(OSError):
                            os.rmdir(dirpath)
                CREATED.unlink()
        finally:
            os.close(fd)
