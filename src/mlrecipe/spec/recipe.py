"""Recipe models: the values of one step, with the reference system's keys.

Pure data: no I/O, no backend imports. Unknown keys are errors. Empty keys (``nproc_per_node:``
with no value, as the reference's values files have) mean "use the default".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

Quantity = str | int | float


class Model(BaseModel):
    """Base of every spec model: unknown keys are errors and null values fall back to defaults."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _as_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value


class EnvVar(Model):
    """One environment variable; ``value`` may hold Helm expressions (``{{ .Release.Name }}``)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    value: str = ""

    @field_validator("value", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        return value


class Resources(Model):
    """Requests/limits are free maps (``nvidia.com/gpu``, ``vpc.amazonaws.com/efa``, cpu, memory)."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)
    nnodes: int = Field(1, ge=1, validation_alias=AliasChoices("nnodes", "num_nodes"))
    nproc_per_node: int = Field(1, ge=1, validation_alias=AliasChoices("nproc_per_node", "procs_per_node"))
    node_type: str | None = Field(None, validation_alias=AliasChoices("node_type", "node_instance_type"))
    min_replicas: int | None = Field(None, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    num_of_hosts: int | None = Field(None, ge=1)
    resources: dict[str, Any] | None = None
    gpu: str | None = None

    @model_validator(mode="after")
    def _replicas_order(self) -> Resources:
        lo, hi = self.min_replicas, self.max_replicas
        if lo is not None and hi is not None and lo > hi:
            raise ValueError("min_replicas must be <= max_replicas")
        return self


class Toleration(Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None
    toleration_seconds: int | None = None


class Pvc(Model):
    name: str = Field(min_length=1)
    mount_path: str = Field(pattern=r"^/")


class Ebs(Model):
    storage: str = "100Gi"
    mount_path: str = Field("/tmp", pattern=r"^/")
    storage_class: str | None = None


class Git(Model):
    repo_url: str | None = None
    branch: str | None = None
    commit: str | None = None


class CommandBlock(Model):
    """The ``train`` / ``process`` block: env, command and args (shell fragments)."""

    env: list[EnvVar] = Field(default_factory=list)
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)

    _lists = field_validator("env", "command", "args", mode="before")(_as_list)

    @field_validator("command", "args", mode="before")
    @classmethod
    def _stringify_items(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
        return value


class Probe(Model):
    enabled: bool = True
    period_secs: int = Field(10, ge=1)
    failure_threshold: int = Field(3, ge=1)
    initial_delay_secs: int | None = Field(None, ge=0)
    timeout_secs: int | None = Field(None, ge=1)
    path: str = "/"
    port: int | None = None


class ServerBlock(CommandBlock):
    """The ``server`` block of serving charts."""

    name: str | None = None
    ports: list[Any] | dict[str, Any] = Field(default_factory=list)
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None
    liveness_probe: Probe | None = None
    resources: dict[str, Any] | None = None
    autoscaling: dict[str, Any] | None = None


class ElasticPolicy(Model):
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] = "c10d"
    rdzv_port: int = Field(44000, ge=1, le=65535)
    min_replicas: int | None = Field(None, ge=1)
    max_replicas: int | None = Field(None, ge=1)
    max_restarts: int = Field(0, ge=0)
    nproc_per_node: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _order(self) -> ElasticPolicy:
        if self.min_replicas and self.max_replicas and self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must be <= max_replicas")
        return self


class MpiRun(Model):
    env: list[EnvVar] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    slots_per_worker: int | None = Field(None, ge=1)
    launcher_node_type: str | None = None
    resources: dict[str, Any] | None = None
    worker_command: list[str] = Field(default_factory=list)
    worker_args: list[str] = Field(default_factory=list)

    @field_validator("args", mode="before")
    @classmethod
    def _stringify_args(cls, value: Any) -> Any:
        value = _as_list(value)
        return [str(v) for v in value] if isinstance(value, list) else value


class ImageRef(Model):
    name: str | None = None
    pull_policy: str | None = None


class Launcher(Model):
    """mlrecipe's structured launcher: expands to the command a user would write by hand."""

    type: Literal["torchrun", "accelerate", "mpirun", "python"]
    script: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    options: list[str] = Field(default_factory=list)
    module: bool = False

    _lists = field_validator("args", "options", mode="before")(_as_list)


COMMAND_BLOCKS = ("train", "process", "server")


class Recipe(Model):
    """The values of one step. Which command block and extra blocks apply comes from the chart."""

    image: str | ImageRef | None = None
    image_pull_policy: str | None = None
    backoff_limit: int | None = Field(None, ge=0)
    framework: str | None = None
    resources: Resources = Field(default_factory=Resources)
    tolerations: list[Toleration] = Field(default_factory=list)
    pvc: list[Pvc] = Field(
        default_factory=lambda: [Pvc(name="pv-fsx", mount_path="/fsx"), Pvc(name="pv-efs", mount_path="/efs")]
    )
    ebs: Ebs | None = None
    git: Git = Field(default_factory=Git)
    inline_script: list[str] = Field(default_factory=list)
    pre_script: list[str] = Field(default_factory=list)
    post_script: list[str] = Field(default_factory=list)
    train: CommandBlock | None = None
    process: CommandBlock | None = None
    server: ServerBlock | None = None
    launcher: Launcher | None = None
    elastic_policy: ElasticPolicy | None = None
    mpirun: MpiRun | None = None
    ray: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None
    step_name: str | None = None
    kueue: dict[str, Any] | None = None
    hyperpod: dict[str, Any] | None = None
    lws: dict[str, Any] | None = None
    shm_size: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    scheduler_name: str | None = None
    ttl_seconds_after_finished: int | None = Field(None, ge=0)
    master_port: int | None = Field(None, ge=1, le=65535)
    env: list[EnvVar] = Field(default_factory=list)
    hf_model_id: str | None = None
    hf_revision: str | None = None
    hf_tensors: Any = None
    hf_secret_name: str | None = None
    hf_secret_key: str | None = None
    helm_global: dict[str, Any] | None = Field(None, alias="global")
    library_values: dict[str, Any] | None = Field(None, alias="mlrecipe-lib")

    _lists = field_validator("inline_script", "pre_script", "post_script", "tolerations", "pvc", mode="before")(
        _as_list
    )

    @field_validator("ebs", mode="before")
    @classmethod
    def _empty_ebs(cls, value: Any) -> Any:
        return None if value == {} else value

    @field_validator("inline_script", "pre_script", "post_script", mode="before")
    @classmethod
    def _script_items(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
        return value

    def command_block(self, key: str) -> CommandBlock:
        """The command block named ``key`` (empty when absent)."""
        block = getattr(self, key)
        return block if block is not None else (ServerBlock() if key == "server" else CommandBlock())

    @property
    def image_name(self) -> str | None:
        return self.image.name if isinstance(self.image, ImageRef) else self.image
