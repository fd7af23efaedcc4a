"""Local volumes: the recipe's pvc mount paths (/efs, /fsx) resolve under a local root.

Each step's nodes run in a private mount namespace (``unshare --mount``) where every pvc mount
path is a bind mount of ``<root>/<pvc name>``, so recipes need no edits. ``ebs`` gets a scratch
directory: bind-mounted at its mount path, or exported as ``TMPDIR`` when that path is /tmp.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from mlrecipe.spec.recipe import Recipe

BIND_SCRIPT = 'set -e; while [ "$1" != "--" ]; do mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"'


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str


def plan_mounts(recipe: Recipe, root: Path, scratch: Path) -> tuple[list[Mount], dict[str, str]]:
    """Bind mounts for ``recipe`` and the extra env (TMPDIR for an ebs volume at /tmp)."""
    mounts = [Mount(root / pvc.name, pvc.mount_path) for pvc in recipe.pvc]
    env: dict[str, str] = {}
    if recipe.ebs is not None:
        if recipe.ebs.mount_path.rstrip("/") == "/tmp":
            env["TMPDIR"] = str(scratch)
        else:
            mounts.append(Mount(scratch, recipe.ebs.mount_path))
    return mounts, env


def wrap_argv(argv: list[str], mounts: list[Mount]) -> list[str]:
    """Wrap ``argv`` so it runs in a private mount namespace with ``mounts`` in place."""
    if not mounts:
        return argv
    pairs: list[str] = []
    for m in mounts:
        pairs += [str(m.source), m.target]
    prefix = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.append("--map-root-user")
    return [*prefix, "sh", "-c", BIND_SCRIPT, "mlrecipe-mounts", *pairs, "--", *argv]


def mount_problems(mounts: list[Mount]) -> list[str]:
    """What stops the bind mounts on this machine, with the fix."""
    if not mounts:
        return []
    if shutil.which("unshare") is None:
        return ["local volumes need 'unshare' (util-linux); install it or set local.volumes: none"]
    problems = []
    for m in mounts:
        if not os.path.isdir(m.target) and os.geteuid() != 0:
            problems.append(
                f"mount point {m.target} does not exist: create it once (sudo mkdir -p {m.target}) "
                "or set local.volumes: none in $MLRECIPE_HOME/config.yaml"
            )
    return problems


def prepare_mounts(mounts: list[Mount]) -> None:
    """Create the local sources and, as root, the empty mount points."""
    for m in mounts:
        m.source.mkdir(parents=True, exist_ok=True)
        if not os.path.isdir(m.target):
            os.makedirs(m.target, exist_ok=True)
