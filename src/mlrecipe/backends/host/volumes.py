"""Local volumes: the recipe's pvc mount paths (/efs, /fsx) resolve under a local root.

Each step's nodes run in a private mount namespace (``unshare --mount``) where every pvc mount
path is a bind mount of ``<root>/<pvc name>``, so recipes need no edits; a mount point this machine lacks is made
in that namespace only (:mod:`.mount_points`), never on its own file systems. ``ebs`` gets a scratch
directory: bind-mounted at its mount path, or exported as ``TMPDIR`` when that path is /tmp. A step whose
recipe selects a ``framework:`` gets a writable copy of its chart's scripts at /etc/framework-scripts, as a
Kubernetes pod does.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlrecipe.backends.host.mount_points import (
    MOUNT_SCRIPT_PATH,
    mount_argv,
    mount_point_problem,
    user_namespaces_problem,
)
from mlrecipe.backends.host.nodes import unshare
from mlrecipe.config import default_volume_root, read_config
from mlrecipe.spec.framework_scripts import SCRIPTS_DIR, framework_scripts
from mlrecipe.spec.load import StepSpec
from mlrecipe.spec.recipe import Recipe


@dataclass(frozen=True)
class Mount:
    """``source`` bound at ``target``; with ``fill_from``, ``source`` is first made a fresh copy of the
    ``fill_files`` (paths relative to ``fill_from``), e.g. a step's writable copy of its framework scripts."""

    source: Path
    target: str
    fill_from: Path | None = None
    fill_files: tuple[str, ...] = ()


def local_volume_root(configured: str | None = None) -> Path:
    """The directory of this machine's pvc volumes, one sub-directory per pvc name, for a backend other than the
    local one that shares them (SageMaker's local mode): ``configured``, else the config file's ``local.root``, else
    ``$MLRECIPE_HOME/volumes``, where the local backend's steps find them too."""
    if configured:
        return Path(configured).expanduser()
    doc = read_config()
    section = doc.data.get("local") if doc is not None and isinstance(doc.data, dict) else None
    root = section.get("root") if isinstance(section, dict) else None
    return Path(root).expanduser() if isinstance(root, str) and root else default_volume_root()


def plan_mounts(recipe: Recipe, pvc_source: Callable[[str], Path], scratch: Path) -> tuple[list[Mount], dict[str, str]]:
    """Bind mounts for ``recipe`` (each pvc's directory from ``pvc_source(name)``) and the extra env (TMPDIR for an
    ebs volume at /tmp)."""
    mounts = [Mount(pvc_source(pvc.name), pvc.mount_path) for pvc in recipe.pvc]
    env: dict[str, str] = {}
    if recipe.ebs is not None:
        if recipe.ebs.mount_path.rstrip("/") == "/tmp":
            env["TMPDIR"] = str(scratch)
        else:
            mounts.append(Mount(scratch, recipe.ebs.mount_path))
    return mounts, env


def framework_mount(step: StepSpec, step_dir: Path) -> Mount | None:
    """The step's own copy of its chart's ``scripts/<framework>/`` (made at submit), bound at /etc/framework-scripts;
    ``None`` when the recipe's framework (or the chart's default) names no scripts the chart ships."""
    found = framework_scripts(step.chart, step.recipe.framework or step.chart.default_framework)
    if found is None:
        return None
    return Mount(step_dir / "framework-scripts", SCRIPTS_DIR, found.source, tuple(found.files()))


def describe_framework_mount(mount: Mount) -> str:
    """One line for a plan: where the scripts come from and where the step sees them."""
    return (f"framework scripts: {len(mount.fill_files)} file(s) of {mount.fill_from} copied to {mount.source} "
            f"(writable), bound at {mount.target}")


def wrap_argv(argv: list[str], mounts: list[Mount], script: Path = MOUNT_SCRIPT_PATH) -> list[str]:
    """Wrap ``argv`` so it runs in a private mount namespace (the one wrapper, :func:`~.nodes.unshare`) with
    ``mounts`` in place (missing mount points made in that namespace only) by the mount script at ``script`` (the
    package's, or a copy where the nodes run)."""
    if not mounts:
        return argv
    return [*unshare(mount=True), *mount_argv([(str(m.source), m.target) for m in mounts], argv, script=script)]


def mount_problems(mounts: list[Mount]) -> list[str]:
    """What stops the bind mounts on this machine, with the fix."""
    if not mounts:
        return []
    if shutil.which("unshare") is None:
        return ["local volumes need 'unshare' (util-linux); install it or set local.volumes: none"]
    problems = [p for p in (mount_point_problem(m.source, m.target) for m in mounts) if p]
    userns = user_namespaces_problem()
    if userns:
        problems.append(f"local volumes need a user namespace when not run as root, and {userns}: enable them, "
                        "run as root, or set local.volumes: none in $MLRECIPE_HOME/config.yaml")
    return problems


def prepare_mounts(mounts: list[Mount]) -> None:
    """Create the local sources (filled copies made afresh); the mount points are made in each node's namespace."""
    for m in mounts:
        if m.fill_from is not None:
            shutil.rmtree(m.source, ignore_errors=True)
            for rel in m.fill_files:
                (m.source / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(m.fill_from / rel, m.source / rel)
        m.source.mkdir(parents=True, exist_ok=True)
