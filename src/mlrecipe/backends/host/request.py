"""A host step as a request: what the local and Slurm backends build the same way from a step, before each renders
it (the local backend into processes, :mod:`mlrecipe.backends.local.plan`; Slurm into a batch script,
:mod:`mlrecipe.backends.slurm.script`).

The request holds the step program, the Python environment of the step's image, the bind mounts (pvc volumes, the
ebs scratch, the framework scripts, the chart's host launch), the files to write, the env every node shares (the
recipe's, the volumes', the contract's) and the notes; how each node is started is the renderer's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.host import framework_needs, triton
from mlrecipe.backends.host.contract import contract_env, node_contract_env, recipe_env, step_program
from mlrecipe.backends.host.images import ImageEnvironments, PythonEnvironment
from mlrecipe.backends.host.launches import host_launch
from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH
from mlrecipe.backends.host.serving import Readiness, fixed_probe_port, readiness
from mlrecipe.backends.host.volumes import Mount, describe_framework_mount, framework_mount, plan_mounts, wrap_argv
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec


@dataclass(frozen=True)
class HostPlacement:
    """Where a host backend puts a step: its image map, the directory of each pvc volume, and whether the step's
    mount paths are bound (``mounts_option`` names the option that turns them off, for the notes)."""

    images: ImageEnvironments
    pvc_source: Callable[[str], Path]
    bind_mounts: bool
    mounts_option: str
    scripts_note_suffix: str = ""  #: said after where the framework scripts are (e.g. that every node sees them)


@dataclass(frozen=True)
class HostStepRequest:
    """One step as the host backends run it, before it is rendered; build it with :meth:`from_step`."""

    step: StepSpec
    step_dir: Path
    program: dict[str, Any]
    python: PythonEnvironment
    mounts: tuple[Mount, ...]
    files: dict[Path, str]  #: files the step needs, written at submit (path -> text)
    wrapper: tuple[str, ...]  #: the chart's host launch's argv prefix before the step runtime (on this host)
    volume_env: dict[str, str]  #: e.g. ``TMPDIR`` for an ebs volume at /tmp
    recipe_env: dict[str, str]
    contract_env: dict[str, str]  #: the env contract every node shares (:func:`node_env` adds the rest)
    notes: tuple[str, ...]  #: the image's and the mounts'
    launch_notes: tuple[str, ...]  #: the chart's host launch's
    readiness: Readiness | None  #: a serving step's readiness check
    fixed_port: int | None  #: a port the serving recipe pins in its probes

    @classmethod
    def from_step(cls, step: StepSpec, ctx: ReleaseContext, where: HostPlacement) -> HostStepRequest:
        """The request of ``step`` in ``ctx``, placed as ``where`` says."""
        step_dir = ctx.step_dir(step.name)
        program = step_program(step, ctx)
        python, image_note = where.images.resolve(step.recipe.image_name)
        notes = [image_note] if image_note else []
        mounts, volume_env = plan_mounts(step.recipe, where.pvc_source, step_dir / "scratch")
        mounts = mounts if where.bind_mounts else []
        scripts = framework_mount(step, step_dir)
        if scripts is not None and where.bind_mounts:
            mounts.append(scripts)
            notes.append(describe_framework_mount(scripts) + where.scripts_note_suffix)
        elif scripts is not None:
            notes.append(f"{where.mounts_option} is none: {scripts.target} is not set up; the framework scripts "
                         f"are in {scripts.fill_from}")
        launch = host_launch(step, step_dir)
        if launch is not None and launch.command:
            program.update(command=launch.command, args=launch.args)
        server = step.chart.kind is StepKind.SERVER
        return cls(
            step=step, step_dir=step_dir, program=program, python=python,
            mounts=tuple(mounts + (launch.mounts if launch else [])),
            files=dict(launch.files) if launch else {},
            wrapper=tuple(launch.wrapper) if launch else (),
            volume_env=volume_env, recipe_env=recipe_env(step, ctx), contract_env=contract_env(step, ctx),
            notes=tuple(notes), launch_notes=tuple(launch.notes) if launch else (),
            readiness=readiness(step, launch.health_path if launch else None) if server else None,
            fixed_port=fixed_probe_port(step) if server else None,
        )

    @property
    def kind(self) -> StepKind:
        return self.step.chart.kind

    @property
    def nnodes(self) -> int:
        return self.step.recipe.resources.nnodes

    @property
    def needs(self) -> tuple[str, ...]:
        """The Python packages (import names) the step's environment must have: the chart's, its command's,
        its framework scripts'."""
        step = self.step
        return tuple(dict.fromkeys(step.chart.host_needs + triton.needs(step) + framework_needs.needs(step)))

    @property
    def program_path(self) -> Path:
        return self.step_dir / "program.json"

    @property
    def scratch(self) -> Path:
        """The step's ebs scratch directory (bound at the ebs mount path, or ``TMPDIR``)."""
        return self.step_dir / "scratch"

    def node_env(self, rank: int, master_addr: str, master_port: int) -> dict[str, str]:
        """The env contract of node ``rank`` beyond :attr:`contract_env` (its rank, the master's address)."""
        return node_contract_env(self.step, rank, master_addr, master_port)

    def runtime_argv(self, wrapper: Sequence[str], python: str, runtime: Path,
                     mount_script: Path = MOUNT_SCRIPT_PATH) -> list[str]:
        """The argv that starts the step runtime (``python runtime program.json``) after ``wrapper``, inside the
        step's mounts (made by the mount script at ``mount_script``)."""
        return wrap_argv([*wrapper, python, str(runtime), str(self.program_path)], list(self.mounts), mount_script)
