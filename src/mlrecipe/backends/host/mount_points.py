"""Mount points made inside a node's private mount namespace, never on this machine's own file systems.

:data:`MOUNT_SCRIPT_PATH` (``mount_points.sh``, run as ``sh <path>``) runs in a fresh mount namespace and binds
each (source, target) pair. A target that exists is bound over directly. When one is missing (``/fsx``,
``/opt/ml`` on a machine without them), or a writable root is asked for, the node gets a root of its own: a tmpfs
holding every entry of ``/`` (directories bound recursively, files bound, links copied), made the root with
``pivot_root``. A missing target is then created in that tmpfs; one below an existing directory of the machine
(``/opt/ml`` under ``/opt``) first gets that directory replaced, in the namespace only, by a tmpfs copy of its
entries. Nothing is written outside the namespace's tmpfs copies. Run with ``inside`` in place of ``root`` by a
program already in such a root (a SageMaker local-mode host's step program, which gets the script in its ``mlrecipe``
channel and binds its file-system channels at the pvcs' mount paths), it makes the missing targets the same way in
that root, and the mounts stay in the caller's namespace; a root it did not make is refused. Standard library only:
the SageMaker local-mode supervisor imports it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

#: The script that makes the mounts (a file of the package, run as ``sh <path>``; Slurm jobs get a copy beside the
#: step runtime).
MOUNT_SCRIPT_PATH = Path(__file__).with_name("mount_points.sh")


def mount_argv(mounts: Sequence[tuple[str, str]], argv: list[str], *, fresh_root: bool = False,
               script: Path = MOUNT_SCRIPT_PATH) -> list[str]:
    """``argv`` run by the mount script at ``script`` (a copy of :data:`MOUNT_SCRIPT_PATH`; already inside a private
    mount namespace) with ``mounts`` (source, target) bound in order; ``fresh_root``: a root of its own even when
    every target exists, so the program may create top-level directories (a SageMaker container's root file system)
    without touching this machine's."""
    pairs = [str(p) for m in mounts for p in m]
    return ["sh", str(script), "root" if fresh_root else "", *pairs, "--", *argv]


def user_namespaces_problem(proc: Path = Path("/proc")) -> str | None:
    """Why a process not run as root cannot have mount points of its own here (user namespaces are off), or None;
    ``proc``: where the kernel's settings are read."""
    if os.geteuid() == 0:
        return None
    try:
        if int((proc / "sys/user/max_user_namespaces").read_text()) == 0:
            return "user namespaces are off (/proc/sys/user/max_user_namespaces is 0)"
    except (OSError, ValueError):
        pass
    try:
        if (proc / "sys/kernel/unprivileged_userns_clone").read_text().strip() == "0":
            return "unprivileged user namespaces are off (/proc/sys/kernel/unprivileged_userns_clone is 0)"
    except OSError:
        pass
    return None


def mount_point_problem(source: Path, target: str) -> str | None:
    """What stops ``target`` from being a mount point for ``source`` (made in a node's namespace only when
    missing): an existing entry of another kind, or a missing one whose path goes through a symbolic link (the
    link's target would be written)."""
    path = Path(target)
    if path.exists():
        if path.is_dir() != (source.is_dir() or not source.exists()):
            return f"mount point {target} is {'a directory' if path.is_dir() else 'a file'}, unlike its source {source}"
        return None
    for parent in reversed(path.parents):
        if parent.is_symlink():
            return f"mount point {target}: {parent} is a symbolic link; name the path without links"
        if parent.exists() and not parent.is_dir():
            return f"mount point {target}: {parent} is not a directory"
    return None
