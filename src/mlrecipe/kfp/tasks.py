"""One Kubeflow Pipelines task per step of a loaded pipeline: pure data, no kfp.

Each task runs ``mlrecipe install RELEASE CHART`` with the step's chart values (its ``step_name`` set, so
names, ``MLRECIPE_STEP`` and ``{{ .Release.Name }}`` are those of ``mlrecipe run``). Credential-like env
values (:mod:`mlrecipe.credentials`) are cut out of the values, exactly as the Kubernetes backend cuts them out of
its manifests: the entry keeps its name, and the task takes the value from one Secret of the pipeline,
``<release>-credentials``, key = variable name.

A step with its own backend (``backend: sagemaker``) runs ``mlrecipe install -b <backend>`` with the pipeline's
``<backend>_opts`` parameter. A SageMaker training step's task has the typed outputs ``model_artifacts`` and
``job_name``, an endpoint step's ``endpoint_name`` and ``url``; a later task that reads them (its recipe's
``sagemaker.model_from`` or a ``$MLRECIPE_<STEP>_<NAME>`` variable) takes them as inputs, which its ``mlrecipe
install`` gets as ``MLRECIPE_<STEP>_<NAME>`` (an endpoint's URL: ``MLRECIPE_<STEP>_URL``, as ``mlrecipe run`` gives
a serving step's URL). Release and namespace are constants of the compiled file, never of the run or the
attempt: a retried task plans the same job names and tags, so the backend adopts the job an earlier attempt made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mlrecipe.backends.kubernetes import ENV_PATHS, lift_ray_env_vars, split_values
from mlrecipe.errors import SecretConflictError
from mlrecipe.spec.errors import SpecError, SpecIssue
from mlrecipe.spec.load import ReleaseSpec, StepSpec
from mlrecipe.spec.names import step_output_var, step_outputs_prefix


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
    backend: str | None = None  #: the step's own backend (None: the pipeline's ``backend`` parameter)
    outputs: tuple[str, ...] = ()  #: typed outputs of the task (a SageMaker training or endpoint step's)
    #: the typed inputs of the task: output name -> the earlier task that gives it
    inputs: tuple[tuple[str, str], ...] = ()

    @property
    def typed(self) -> bool:
        """Whether the task has typed outputs or inputs (it runs the typed component)."""
        return bool(self.outputs or self.inputs)

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


#: The typed outputs of a SageMaker training step (its ``model_artifacts`` URI and its job's name).
TRAINING_OUTPUTS = ("model_artifacts", "job_name")
#: The typed outputs of a SageMaker endpoint step (its name and its URL).
ENDPOINT_OUTPUTS = ("endpoint_name", "url")
#: Every typed output a task may have: the typed component's outputs, in order.
TYPED_OUTPUTS = TRAINING_OUTPUTS + ENDPOINT_OUTPUTS
ENDPOINT_CHART = "serving/sagemaker-endpoint"


def _outputs_of(step: StepSpec) -> tuple[str, ...]:
    if step.backend != "sagemaker":
        return ()
    return ENDPOINT_OUTPUTS if step.chart.name == ENDPOINT_CHART else TRAINING_OUTPUTS


def _inputs(step: StepSpec, values: dict[str, Any], producers: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """The typed outputs of earlier tasks that ``step`` reads (name -> task): those its ``sagemaker.model_from``
    names, and each ``$MLRECIPE_<TASK>_<NAME>`` in its values (all of a task's when only the prefix shows); a name
    two tasks give comes from the later one."""
    text = json.dumps(values)
    block = step.recipe.sagemaker
    out: dict[str, str] = {}
    for source, outputs in producers.items():
        prefix = step_outputs_prefix(source)
        named = [name for name in outputs if step_output_var(source, name) in text]
        if block is not None and block.model_from == source:
            named += [name for name in TRAINING_OUTPUTS if name in outputs]
        out.update(dict.fromkeys(named or (outputs if prefix in text else ()), source))
    return out


def _task(step: StepSpec, depends_on: frozenset[str],
          producers: dict[str, tuple[str, ...]]) -> tuple[StepTask, dict[str, str]]:
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
        backend=step.backend,
        outputs=_outputs_of(step),
        inputs=tuple(sorted(_inputs(step, values, producers).items(), key=lambda i: TYPED_OUTPUTS.index(i[0]))),
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
    producers: dict[str, tuple[str, ...]] = {}
    for step in spec.steps:
        task, credentials = _task(step, deps[step.name], producers)
        if task.outputs:
            producers[step.name] = task.outputs
        for name, value in credentials.items():
            first = seen.setdefault(name, (step.name, value))
            if first[1] != value:
                issues.append(_env_issue(step, name, f"{name} differs from its value in step {first[0]}; the "
                                         f"pipeline's Secret {secret_name(spec.release)} holds one value per name"))
            if task.backend == "sagemaker":
                issues.append(_env_issue(step, name, f"{name} looks like a credential: a SageMaker step's task gets "
                                         "its AWS credentials from the run's service account (IRSA: AWS_ROLE_ARN and "
                                         "AWS_WEB_IDENTITY_TOKEN_FILE), never from the pipeline; remove it"))
        tasks.append(task)
    if issues:
        raise SpecError(issues)
    description = f"mlrecipe pipeline {spec.release}: {len(tasks)} steps, each one mlrecipe install"
    return PipelinePlan(spec.release, spec.namespace, description, tuple(tasks), secret_name(spec.release))
