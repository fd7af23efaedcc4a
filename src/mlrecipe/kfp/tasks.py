"""One Kubeflow Pipelines task per step of a loaded pipeline: pure data, no kfp.

Each task runs ``mlrecipe install RELEASE CHART`` with the step's chart values (its ``step_name`` set, so
names, ``MLRECIPE_STEP`` and ``{{ .Release.Name }}`` are those of ``mlrecipe run``). Credential-like env
values (:mod:`mlrecipe.secrets`) are cut out of the values, exactly as the Kubernetes backend cuts them out of
its manifests: the entry keeps its name, and the task takes the value from one Secret of the pipeline,
``<release>-credentials``, key = variable name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mlrecipe.backends.kubernetes import ENV_PATHS, lift_ray_env_vars, split_values
from mlrecipe.errors import SecretConflictError
from mlrecipe.spec.errors import SpecError, SpecIssue
from mlrecipe.spec.load import ReleaseSpec, StepSpec


@dataclass(frozen=True)
class Volume:
    """A PersistentVolumeClaim mounted into a task's pod (a recipe's ``pvc`` entry)."""

    claim: str
    mount_path: str


@dataclass(frozen=True)
class StepTask:
    """What one KFP task runs: the step's chart and values, and how KFP schedules it."""

    name: str
    chart: str
    values: dict[str, Any]  #: chart values without credential values
    secret_env: tuple[str, ...]  #: env names whose values the task takes from the pipeline's Secret
    depends_on: tuple[str, ...]
    retries: int  #: the recipe's backoff_limit
    volumes: tuple[Volume, ...]

    @property
    def values_json(self) -> str:
        """The values as the task receives them: JSON text, in the recipe's key order."""
        return json.dumps(self.values)


@dataclass(frozen=True)
class PipelinePlan:
    """The tasks of one release, in a valid order, and the Secret their credentials come from."""

    release: str
    namespace: str
    description: str
    tasks: tuple[StepTask, ...]
    secret_name: str

    @property
    def secret_keys(self) -> tuple[str, ...]:
        """Every key the pipeline's Secret must hold."""
        return tuple(sorted({name for task in self.tasks for name in task.secret_env}))


def secret_name(release: str) -> str:
    """The Secret holding a pipeline's credentials: ``<release>-credentials``."""
    return f"{release}-credentials"


def _env_issue(step: StepSpec, name: str, message: str) -> SpecIssue:
    for path in ENV_PATHS:
        node: Any = step.values
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        for i, entry in enumerate(node if isinstance(node, list) else []):
            if isinstance(entry, dict) and entry.get("name") == name:
                return step.issue(f"{'.'.join(path)}[{i}].value", message)
    return step.issue(step.chart.block, message)


def _task(step: StepSpec, depends_on: frozenset[str]) -> tuple[StepTask, dict[str, str]]:
    try:
        values, _ = lift_ray_env_vars(step.chart_values(), step.chart.block)
        values, credentials = split_values(values)
    except SecretConflictError as exc:
        raise SpecError([step.issue(step.chart.block, str(exc))]) from None
    task = StepTask(
        name=step.name,
        chart=step.chart.name,
        values=values,
        secret_env=tuple(sorted(credentials)),
        depends_on=tuple(sorted(depends_on)),
        retries=step.recipe.backoff_limit or 0,
        volumes=tuple(Volume(p.name, p.mount_path) for p in step.recipe.pvc),
    )
    return task, credentials


def plan_pipeline(spec: ReleaseSpec) -> PipelinePlan:
    """The KFP tasks of ``spec`` (matrix steps already expanded by the loader), in the spec's order.

    Raises :class:`SpecError` at the recipe's line when one credential name has two values (the pipeline's
    Secret holds one value per name).
    """
    deps = spec.dependencies()
    tasks: list[StepTask] = []
    seen: dict[str, tuple[str, str]] = {}
    issues: list[SpecIssue] = []
    for step in spec.steps:
        task, credentials = _task(step, deps[step.name])
        for name, value in credentials.items():
            first = seen.setdefault(name, (step.name, value))
            if first[1] != value:
                issues.append(_env_issue(step, name, f"{name} differs from its value in step {first[0]}; the "
                                         f"pipeline's Secret {secret_name(spec.release)} holds one value per name"))
        tasks.append(task)
    if issues:
        raise SpecError(issues)
    description = f"mlrecipe pipeline {spec.release}: {len(tasks)} steps, each one mlrecipe install"
    return PipelinePlan(spec.release, spec.namespace, description, tuple(tasks), secret_name(spec.release))
