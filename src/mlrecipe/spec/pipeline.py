"""Pipeline models: a release made of ordered (or dependent) steps."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from mlrecipe.spec.model import Model, new_dict, new_list
from mlrecipe.spec.names import NAME_PATTERN


class PipelineStep(Model):
    """One step: a chart, its recipe (path(s) or inline values) and value overrides."""

    name: str = Field(
        min_length=1, max_length=40, pattern=NAME_PATTERN,
        description="Step name, unique in the pipeline (DNS label); MLRECIPE_STEP and label mlrecipe.io/step.",
    )
    chart: str = Field(
        min_length=1, description="Chart of the step, by catalog name (e.g. training/pytorchjob-distributed)."
    )
    recipe: str | list[str] | dict[str, Any] | None = Field(
        None,
        description="The step's values: a recipe file (relative to this file), a list of files merged in order, "
        "or the values inline.",
    )
    values: dict[str, Any] = Field(
        default_factory=new_dict, description="Values merged over the recipe (as helm --set / a later -f file would)."
    )
    depends_on: list[str] = Field(
        default_factory=new_list,
        description="Steps that must succeed before this one (a name or a list; [] for none); when no step sets "
        "it, the steps run in file order.",
    )
    backend: str | None = Field(
        None, min_length=1, max_length=40, pattern=NAME_PATTERN,
        description="Backend that runs this step (local, slurm, kubernetes or sagemaker), e.g. data preparation "
        "locally and training on Slurm in one release; default: the pipeline's backend (--backend wins over that one "
        "only). Its options come from the config file's section of that backend.",
    )
    matrix: dict[str, list[Any]] | None = Field(
        None,
        description="A sweep: value paths in --set syntax (resources.nnodes, elastic_policy.max_restarts) mapped to "
        "lists of values; the step runs once per combination, each a step of its own named "
        "<name>-<key>-<value>... (or <name>-<index> when that is too long); steps that depend on this one wait "
        "for all of them.",
    )

    @field_validator("depends_on", mode="before")
    @classmethod
    def _one_dependency(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class Sweep(Model):
    """How the end-of-run table ranks a pipeline's matrix combinations."""

    rank_by: str = Field(
        min_length=1, description="Metric that ranks the combinations (a name the steps report to "
        "$MLRECIPE_METRICS_FILE, e.g. eval_loss); the latest value each step reported counts.",
    )
    goal: Literal["min", "max"] = Field("min", description="min: the lowest value ranks first; max: the highest.")


class Pipeline(Model):
    """A pipeline file: ``release``, ``namespace``, ``backend`` and ``steps``."""

    release: str = Field(
        min_length=1, max_length=40, pattern=NAME_PATTERN,
        description="Release name (DNS label): one name, namespace and state record for all the steps.",
    )
    namespace: str = Field(
        "default", min_length=1, max_length=63, pattern=NAME_PATTERN,
        description="Kubernetes namespace of the release (also part of its state path on every backend).",
    )
    backend: str | None = Field(
        None,
        description="Backend that runs the pipeline: local, slurm, kubernetes or sagemaker; --backend wins; default: "
        "local.",
    )
    description: str | None = Field(None, description="Free text describing the pipeline.")
    steps: list[PipelineStep] = Field(min_length=1, description="The steps, run in order or as depends_on allows.")
    sweep: Sweep | None = Field(
        None, description="Ranking of the matrix steps' combinations in the table printed at the end of a run.",
    )
