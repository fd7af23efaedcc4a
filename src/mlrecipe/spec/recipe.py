"""Recipe models: the values of one step, with the reference system's keys.

Pure data: no I/O, no backend imports. Unknown keys are errors. Empty keys (``nproc_per_node:``
with no value, as the reference's values files have) mean "use the default".
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from mlrecipe.spec.model import Model, new_dict, new_list

#: The quantities every backend reads (a Kubernetes quantity without sign or exponent): 4, 0.5, 500m, 16Gi, 100G.
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")


def _quantity(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a number or a quantity such as 500m, 4 or 16Gi")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number or a quantity such as 500m, 4 or 16Gi")
    if isinstance(value, int | float) and value < 0:
        raise ValueError("must not be negative")
    if isinstance(value, str) and not _QUANTITY.match(value.strip()):
        shown = value if len(value) <= 40 else f"{value[:37]}..."
        raise ValueError(f"cannot read quantity {shown!r}: give a number, optionally with a suffix such as 500m, "
                         "4 or 16Gi")
    return value


#: Most nodes (and replicas) a step may ask for, and most processes per node: far above any cluster, and small
#: enough that a plan listing every node stays small (2**31 nodes made a Slurm plan take all the memory).
MAX_NODES = 100_000
MAX_PROCS = 4096
#: Kubernetes' integer fields (probe periods, retries, TTLs) are 32-bit.
INT32 = 2**31 - 1

#: A Kubernetes resource quantity: a number or a string such as ``500m``, ``16Gi`` (never .nan or .inf).
Quantity = Annotated[str | int | float, BeforeValidator(_quantity)]


def _as_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value


class EnvVar(Model):
    """One environment variable; ``value`` may hold Helm expressions (``{{ .Release.Name }}``)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", description="Variable name.")
    value: str = Field(
        "", description="Value; may hold Helm expressions such as {{ .Release.Name }}, evaluated on every backend."
    )

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

    requests: dict[str, Quantity] = Field(
        default_factory=new_dict,
        description="Resource requests per node: cpu, memory, nvidia.com/gpu, vpc.amazonaws.com/efa, "
        "aws.amazon.com/neuron, ... (container requests on Kubernetes; sbatch resources on Slurm).",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=new_dict, description="Resource limits per node, same keys as requests (GPUs usually go here)."
    )
    nnodes: int = Field(
        1, ge=1, le=MAX_NODES, validation_alias=AliasChoices("nnodes", "num_nodes", "gpu_nodes"),
        description="Number of nodes (pods / Slurm nodes / local process groups); PET_NNODES. Aliases: num_nodes, "
        "gpu_nodes (training/mpijob-horovod-tensorflow-gpu).",
    )
    nproc_per_node: int = Field(
        1, ge=1, le=MAX_PROCS, validation_alias=AliasChoices("nproc_per_node", "procs_per_node", "gpus_per_node"),
        description="Processes per node (torchrun --nproc_per_node, MPI slots per worker); PET_NPROC_PER_NODE. "
        "Aliases: procs_per_node, gpus_per_node (training/mpijob-horovod-tensorflow-gpu).",
    )
    node_type: str | None = Field(
        None, validation_alias=AliasChoices("node_type", "node_instance_type", "gpu_instance_type"),
        description="EC2 instance type: node selector node.kubernetes.io/instance-type on Kubernetes "
        "(not mapped on Slurm or locally). Aliases: node_instance_type, gpu_instance_type.",
    )
    min_replicas: int | None = Field(
        None, ge=0, le=MAX_NODES, description="Serving: fewest replicas (wins over server.autoscaling.minReplicas)."
    )
    max_replicas: int | None = Field(
        None, ge=1, le=MAX_NODES, description="Serving: most replicas (wins over server.autoscaling.maxReplicas)."
    )
    num_of_hosts: int | None = Field(
        None, ge=1, le=MAX_NODES, description="Ray Serve: hosts per worker replica (numOfHosts, multi-host serving)."
    )
    resources: dict[str, Any] | None = Field(
        None, description="Serving: {requests, limits} of the server container, as the reference examples nest it."
    )
    gpu: str | None = Field(
        None, description="Accepted for reference recipes and not used: request GPUs in requests/limits."
    )

    @model_validator(mode="after")
    def _replicas_order(self) -> Resources:
        lo, hi = self.min_replicas, self.max_replicas
        if lo is not None and hi is not None and lo > hi:
            raise ValueError("min_replicas must be <= max_replicas")
        return self


class Toleration(Model):
    """A Kubernetes pod toleration of node taints (ignored by the local and Slurm backends)."""

    key: str | None = Field(None, description="Taint key to tolerate; empty with operator Exists: every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(
        None, description="Exists (any value) or Equal (the value below); Kubernetes default: Equal."
    )
    value: str | None = Field(None, description="Taint value matched by operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to tolerate; empty: every effect."
    )
    tolerationSeconds: int | None = Field(
        None, description="NoExecute: seconds the pod stays bound after the taint appears (Kubernetes spelling)."
    )
    toleration_seconds: int | None = Field(None, description="Same as tolerationSeconds (reference spelling).")


class Pvc(Model):
    """A PersistentVolumeClaim mounted in every node."""

    name: str = Field(
        min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="Claim name (pv-fsx, pv-efs): a Kubernetes object name (lowercase letters, digits, '-' and '.'); "
        "locally and on Slurm the directory of the volume of that name, so never a path.",
    )
    mount_path: str = Field(pattern=r"^/", description="Absolute mount path in every node (/fsx, /efs).")


class Ebs(Model):
    """A scratch EBS volume per node (a generic ephemeral volume on Kubernetes, a scratch directory locally)."""

    storage: str = Field("100Gi", description="Size of the volume (Kubernetes quantity, e.g. 200Gi).")
    mount_path: str = Field(
        "/tmp", pattern=r"^/", description="Absolute mount path; /tmp sets TMPDIR to the scratch directory locally."
    )
    storage_class: str | None = Field(None, description="StorageClass of the volume; empty: ebs-sc-wait.")


class SageMakerInput(Model):
    """A data channel of a SageMaker training job, mounted at /opt/ml/input/data/<name> (SM_CHANNEL_<NAME>)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9.\-_]+$", description="Channel name.")
    uri: str = Field(
        pattern=r"^(s3|file)://", description="s3://bucket/prefix, or file:///path (local mode) to stage in it."
    )


class SageMakerBlock(Model):
    """What a step needs only when it runs on the SageMaker backend (ignored elsewhere)."""

    inputs: list[SageMakerInput] = Field(
        default_factory=new_list, description="Data channels [{name, uri}] of the training job."
    )
    model_from: str | None = Field(
        None, min_length=1, description="serving/sagemaker-endpoint: the earlier step whose model_artifacts it serves."
    )
    model_data: str | None = Field(
        None, min_length=1, description="serving/sagemaker-endpoint: the model archive's URI instead (s3://, file:// "
        "in local mode; $MLRECIPE_<STEP>_MODEL_ARTIFACTS is expanded)."
    )


class Git(Model):
    """A Git repository cloned into $HOME/tmp/$HOSTNAME (GIT_CLONE_DIR) before the scripts run."""

    repo_url: str | None = Field(None, description="URL of the repository; empty: nothing is cloned.")
    branch: str | None = Field(None, description="Branch to check out; empty: the default branch.")
    commit: str | None = Field(
        None, description="Commit checked out after the branch (git reset --hard); empty: the branch head."
    )


class CommandBlock(Model):
    """The ``train`` / ``process`` block: env, command and args (shell fragments)."""

    env: list[EnvVar] = Field(
        default_factory=new_list,
        description="Environment [{name, value}] of every node; values may hold Helm expressions.",
    )
    command: list[str] = Field(
        default_factory=new_list, description="Command words, joined with the args by spaces and run by bash."
    )
    args: list[str] = Field(
        default_factory=new_list, description="Argument words; shell fragments such as '2>&1 | tee $LOG' are allowed."
    )

    _lists = field_validator("env", "command", "args", mode="before")(_as_list)

    @field_validator("command", "args", mode="before")
    @classmethod
    def _stringify_items(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
        return value


class Probe(Model):
    """An HTTP probe of the server (Kubernetes probe; the local backend's readiness watcher)."""

    enabled: bool = Field(True, description="false: no such probe.")
    period_secs: int = Field(10, ge=1, le=INT32, description="Seconds between probes (periodSeconds).")
    failure_threshold: int = Field(3, ge=1, le=INT32, description="Failed probes before giving up (failureThreshold).")
    initial_delay_secs: int | None = Field(
        None, ge=0, le=INT32, description="Seconds before the first probe (initialDelaySeconds)."
    )
    timeout_secs: int | None = Field(
        None, ge=1, le=INT32, description="Seconds before a probe times out (timeoutSeconds)."
    )
    path: str = Field("/", description="HTTP path probed (httpGet.path).")
    port: int | None = Field(
        None, ge=1, le=65535, description="Port probed; empty: the port named http, else the first port."
    )


class ServerBlock(CommandBlock):
    """The ``server`` block of serving charts."""

    name: str | None = Field(None, description="Name of the server container; empty: the chart's default.")
    ports: list[Any] | dict[str, Any] = Field(
        default_factory=new_list,
        description="Ports: a list [{name, value}] or a map {http: 8000, grpc: 8001, metrics: 8002}.",
    )
    readiness_probe: Probe | None = Field(None, description="When the server is ready to take requests.")
    startup_probe: Probe | None = Field(None, description="How long the server may take to start.")
    liveness_probe: Probe | None = Field(None, description="When a running server is restarted.")
    resources: dict[str, Any] | None = Field(
        None, description="{requests, limits} of the server container, used when resources has none."
    )
    autoscaling: dict[str, Any] | None = Field(
        None,
        description="Replicas and HorizontalPodAutoscaler {minReplicas, maxReplicas, ...}; "
        "created when maxReplicas > minReplicas.",
    )


class ElasticPolicy(Model):
    """torchrun elastic rendezvous (PyTorchJob elasticPolicy); every backend sets PET_RDZV_*."""

    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] = Field(
        "c10d", description="Rendezvous backend (PET_RDZV_BACKEND)."
    )
    rdzv_port: int = Field(44000, ge=1, le=65535, description="Rendezvous port on the first node.")
    min_replicas: int | None = Field(
        None, ge=1, le=MAX_NODES,
        description="Fewest nodes the job runs with (elasticPolicy.minReplicas); empty: resources.nnodes.",
    )
    max_replicas: int | None = Field(
        None, ge=1, le=MAX_NODES,
        description="Most nodes the job runs with (elasticPolicy.maxReplicas); empty: resources.nnodes.",
    )
    max_restarts: int = Field(
        0, ge=0, le=INT32, description="torchrun --max-restarts (elasticPolicy.maxRestarts; a requeue on Slurm)."
    )
    nproc_per_node: int | None = Field(
        None, ge=1, le=MAX_PROCS,
        description="Processes per node (PET_NPROC_PER_NODE) on the local and Slurm backends; "
        "empty: resources.nproc_per_node."
    )

    @model_validator(mode="after")
    def _order(self) -> ElasticPolicy:
        if self.min_replicas and self.max_replicas and self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must be <= max_replicas")
        return self


class MpiRun(Model):
    """The MPIJob launcher: mpirun's env and arguments, the launcher pod and the worker containers."""

    env: list[EnvVar] = Field(
        default_factory=new_list, description="Launcher env [{name, value}]; export to ranks with '-x NAME' in args."
    )
    args: list[str] = Field(
        default_factory=new_list, description="mpirun arguments; '-np <nodes * slots>' is added unless given."
    )
    slots_per_worker: int | None = Field(
        None, ge=1,
        description="Accepted for reference recipes and not used: slotsPerWorker is resources.nproc_per_node.",
    )
    launcher_node_type: str | None = Field(
        None, description="EC2 instance type of the launcher pod; empty: no node selector."
    )
    resources: dict[str, Any] | None = Field(
        None, description="Launcher pod {requests, limits}; default 250m CPU / 256Mi."
    )
    worker_command: list[str] = Field(
        default_factory=lambda: ["/usr/sbin/sshd", "-De"],
        description="Worker container command: sshd, which mpirun reaches over ssh to start the ranks (the MPI "
        "operator's way); []: the image's entrypoint (an image whose entrypoint runs sshd).",
    )
    worker_args: list[str] = Field(default_factory=new_list, description="Worker container args.")
    spread_workers: bool = Field(
        False, description="Spread the worker pods over nodes: at most one more worker on any node than on another "
        "(topologySpreadConstraints on kubernetes.io/hostname, DoNotSchedule).",
    )

    @field_validator("args", mode="before")
    @classmethod
    def _stringify_args(cls, value: Any) -> Any:
        value = _as_list(value)
        return [str(v) for v in value] if isinstance(value, list) else value


def _duration(value: Any) -> Any:
    from mlrecipe.runtime.step_runtime import parse_duration  # the runtime's own reading; loaded when one is given

    parse_duration(value)
    return value


#: A duration as recipes write it: seconds, or number-unit parts (``90s``, ``10m``, ``1h30m``; ms, s, m, h, d).
Duration = Annotated[str | int | float, BeforeValidator(_duration)]


class Watchdog(Model):
    """Hang detection by the step runtime in every node (docs/operating.md)."""

    hang_timeout: Duration = Field(
        description="No progress for this long is a hang: no new line in $MLRECIPE_METRICS_FILE and no new output "
        "of any node (e.g. 10m, 90s, 1h30m; a number is seconds)."
    )
    on_hang: Literal["fail", "restart"] = Field(
        "fail", description="fail: the step ends failed after the stacks are taken; restart: every node runs the "
        "command again (a gang restart: the command resumes from its checkpoint), at most max_restarts times."
    )
    max_restarts: int = Field(1, ge=0, le=100, description="Restarts after hangs before the step fails (on_hang: "
                              "restart).")


class NetworkCheck(Model):
    """The fabric check by the step runtime before the command (docs/operating.md, Fabric check)."""

    min_ratio: float | None = Field(None, gt=0, le=10, description="Fail the step before its command when the "
                                    "measured bus bandwidth is below this share of the node type's baseline.")
    node_type: str | None = Field(None, description="Instance type whose baseline gives the ratio (p4d.24xlarge, "
                                  "p5.48xlarge, ...); default: the step's node_type.")


class ImageRef(Model):
    """An image given as a map, as the serving charts of the reference take it."""

    name: str | None = Field(None, description="Container image (repo:tag).")
    pull_policy: str | None = Field(None, description="Image pull policy: IfNotPresent, Always or Never.")


class Launcher(Model):
    """mlrecipe's structured launcher: expands to the command a user would write by hand."""

    type: Literal["torchrun", "accelerate", "mpirun", "python"] = Field(
        description="Launcher; its node and rank flags come from the PET_* env contract."
    )
    script: str = Field(min_length=1, description="Script path (or module name with module: true).")
    args: list[str] = Field(default_factory=new_list, description="Arguments of the script.")
    options: list[str] = Field(
        default_factory=new_list, description="Extra launcher options, placed before the script."
    )
    module: bool = Field(False, description="Run script as a Python module (-m).")

    _lists = field_validator("args", "options", mode="before")(_as_list)


COMMAND_BLOCKS = ("train", "process", "server")


@with_config(ConfigDict(extra="forbid"))
class HeadResources(TypedDict, total=False):
    """``ray.resources``: the Ray head's {requests, limits, node_type}, read as a plain mapping."""

    requests: Annotated[dict[str, Quantity], Field(description="Resource requests of the head (cpu, memory, ...).")]
    limits: Annotated[dict[str, Quantity], Field(description="Resource limits of the head, same keys as requests.")]
    node_type: Annotated[str, Field(description="EC2 instance type of the head node.")]


@with_config(ConfigDict(extra="allow"))
class RayValues(TypedDict, total=False):
    """The ``ray`` block: free KubeRay settings, of which ``resources`` is read by every backend."""

    resources: Annotated[HeadResources, Field(description="Resources of the Ray head: {requests, limits, node_type}.")]


class Recipe(Model):
    """The values of one step. Which command block and extra blocks apply comes from the chart."""

    image: str | ImageRef | None = Field(
        None,
        description="Container image 'repo:tag', or {name, pull_policy}; the local and Slurm backends run it "
        "in the Python environment the image maps to.",
    )
    image_pull_policy: str | None = Field(None, description="Image pull policy: IfNotPresent, Always or Never.")
    backoff_limit: int | None = Field(
        None, ge=0, le=INT32,
        description="Retries of the job (Job backoffLimit / runPolicy.backoffLimit; a requeue on Slurm)."
    )
    framework: str | None = Field(
        None, min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Scripts shipped by the chart under scripts/<framework>/, mounted at /etc/framework-scripts.",
    )
    resources: Resources = Field(
        default_factory=Resources, description="Nodes, processes per node, instance type, requests and limits."
    )
    tolerations: list[Toleration] = Field(
        default_factory=new_list, description="Pod tolerations [{key, operator, value, effect, toleration_seconds}]."
    )
    pvc: list[Pvc] = Field(
        default_factory=lambda: [Pvc(name="pv-fsx", mount_path="/fsx"), Pvc(name="pv-efs", mount_path="/efs")],
        description="PersistentVolumeClaims [{name, mount_path}] mounted in every node; default pv-fsx at /fsx "
        "and pv-efs at /efs (local and Slurm: directories of the same names bind-mounted there).",
    )
    ebs: Ebs | None = Field(None, description="Scratch EBS volume per node: {storage, mount_path, storage_class}.")
    git: Git = Field(
        default_factory=Git, description="Repository cloned into $HOME/tmp/$HOSTNAME (GIT_CLONE_DIR) in every node."
    )
    inline_script: list[str] = Field(
        default_factory=new_list,
        description="Shell blocks run first in every node (e.g. heredocs writing config files).",
    )
    pre_script: list[str] = Field(default_factory=new_list, description="Shell lines run before the command.")
    post_script: list[str] = Field(default_factory=new_list, description="Shell lines run after the command.")
    train: CommandBlock | None = Field(None, description="Command block of the training charts: env, command, args.")
    process: CommandBlock | None = Field(
        None, description="Command block of the data-prep and model-prep charts: env, command, args."
    )
    server: ServerBlock | None = Field(
        None, description="Command block of the serving charts, with ports, probes and autoscaling."
    )
    launcher: Launcher | None = Field(
        None, description="mlrecipe's launcher (torchrun, accelerate, mpirun, python), expanded into the command."
    )
    elastic_policy: ElasticPolicy | None = Field(
        None, description="Elastic torchrun rendezvous (PyTorchJob elasticPolicy) of training/pytorchjob-elastic."
    )
    mpirun: MpiRun | None = Field(None, description="The MPIJob launcher: mpirun env and args, launcher pod, workers.")
    ray: RayValues | None = Field(
        None, description="KubeRay settings: version, head (ports, resources), runtime env or serve config, env."
    )
    engine: dict[str, Any] | None = Field(
        None, description="Ray Serve engine configuration: {config, code}, written to engine-config.json."
    )
    snapshot: dict[str, Any] | None = Field(
        None, description="hf-snapshot: {dir, user, group}: where the model snapshot goes and who owns it."
    )
    horovod: dict[str, Any] | None = Field(
        None, description="Horovod settings {autotune, log_level} (HOROVOD_*) of "
        "training/mpijob-horovod-tensorflow-gpu."
    )
    nccl: dict[str, Any] | None = Field(None, description="NCCL settings {ifname, debug_level} (NCCL_SOCKET_IFNAME, "
                                        "NCCL_DEBUG) of training/mpijob-horovod-tensorflow-gpu.")
    tensorflow: dict[str, Any] | None = Field(
        None, description="TensorFlow settings {sys_memory_mb, autotune_threshold, cpp_min_log_level, "
        "mixed_precision, gpu_allocator} (TF_*) of training/mpijob-horovod-tensorflow-gpu."
    )
    jupyter: dict[str, Any] | None = Field(
        None, description="testing/jupyter: Jupyter Lab {name, port, target_port, gpu_instance_type, token_secret, "
        "root_dir}."
    )
    tensorboard: dict[str, Any] | None = Field(
        None, description="testing/jupyter: TensorBoard {name, port, target_port, upstream_port}."
    )
    nginx: dict[str, Any] | None = Field(
        None, description="testing/jupyter: the TLS and password proxy in front of TensorBoard {name, image, "
        "ssl_certificate, ssl_certificate_key, tls_secret, user, htpasswd (a hash), htpasswd_secret}."
    )
    watchdog: Watchdog | None = Field(
        None, description="Hang detection: {hang_timeout, on_hang: fail|restart, max_restarts}: every node's Python "
        "stacks are taken when the step makes no progress for hang_timeout; unset: no watchdog."
    )
    network_check: NetworkCheck | None = Field(
        None, description="Fabric check of a multi-node step: true or {min_ratio, node_type}: a timed all-reduce "
        "(1-64 MiB) across the nodes before the command, its transport and bus bandwidth in the step's log directory."
    )
    step_name: str | None = Field(
        None, description="Step name (label mlrecipe.io/step, MLRECIPE_STEP); default: the pipeline step or chart name."
    )
    kueue: dict[str, Any] | None = Field(
        None, description="Kueue {queue_name, priority_class}: kueue.x-k8s.io/queue-name and priority-class labels."
    )
    hyperpod: dict[str, Any] | None = Field(
        None, description="SageMaker HyperPod overlay: {enabled, auto_restart (default true), max_retry, "
        "tolerations}: ml. instance types, the job auto-resume annotations, tolerations of HyperPod's taints."
    )
    sagemaker: SageMakerBlock | None = Field(
        None, description="SageMaker backend settings: {inputs: [{name, uri}]}, the training job's data channels; "
        "{model_from | model_data} of an endpoint."
    )
    lws: dict[str, Any] | None = Field(
        None, description="LeaderWorkerSet settings: {size, worker_mode, master_port, rbac}."
    )
    shm_size: str | None = Field(None, description="Size limit of the memory-backed /dev/shm (e.g. 64Gi); unset: none.")
    node_selector: dict[str, str] = Field(default_factory=new_dict, description="Extra pod node selector labels.")
    scheduler_name: str | None = Field(None, description="Pod schedulerName; empty: the default scheduler.")
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, le=INT32, description="Job ttlSecondsAfterFinished; unset: the finished Job is kept."
    )
    master_port: int | None = Field(
        None, ge=1, le=65535, description="PET_MASTER_PORT of multi-node (Indexed) Jobs of data-prep/data-process."
    )
    env: list[EnvVar] = Field(
        default_factory=new_list, description="Extra env [{name, value}] of model-prep/hf-snapshot (reference form)."
    )
    hf_model_id: str | None = Field(None, description="Hugging Face Hub model id (HF_MODEL_ID).")
    hf_revision: str | None = Field(None, description="Branch, tag or commit of the model (HF_REVISION).")
    hf_tensors: Any = Field(
        None, description="Also download weight files (*.safetensors, *.bin); false: configs and tokenizers only."
    )
    hf_secret_name: str | None = Field(
        None, description="Secret holding the hub token (env HF_TOKEN); the token is never put in values."
    )
    hf_secret_key: str | None = Field(None, description="Key of the token in that Secret (chart default: token).")
    helm_global: dict[str, Any] | None = Field(
        None, alias="global", description="Helm global values, passed through to the chart."
    )
    library_values: dict[str, Any] | None = Field(
        None, alias="mlrecipe-lib",
        description="Values of the mlrecipe-lib library chart; set by mlrecipe (pipeline_env, secret_env).",
    )

    _lists = field_validator("inline_script", "pre_script", "post_script", "tolerations", "pvc", mode="before")(
        _as_list
    )

    @field_validator("network_check", mode="before")
    @classmethod
    def _check_switch(cls, value: Any) -> Any:
        """``network_check: true`` is the check with its defaults; ``false`` none (one error for a bad map)."""
        if value is True:
            return {}
        return None if value is False else value

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
