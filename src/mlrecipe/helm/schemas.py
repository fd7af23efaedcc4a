"""Source of the charts' ``values.schema.json`` files (draft-07, understood by Helm 3 and 4).

The schemas share one vocabulary (the reference charts' value keys plus mlrecipe's ``step_name``,
``launcher``, ``kueue`` and ``hyperpod``); unknown keys are rejected everywhere so that typos fail
with a field path. ``python -m mlrecipe.helm.schemas`` rewrites the files; a test checks that the
committed files equal :func:`chart_schema`.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from mlrecipe.helm.render import charts_root

S: dict[str, Any] = {"type": ["string", "null"]}
INT: dict[str, Any] = {"type": ["integer", "null"], "minimum": 0}
POS: dict[str, Any] = {"type": ["integer", "null"], "minimum": 1}
BOOL: dict[str, Any] = {"type": ["boolean", "null"]}
WORD: dict[str, Any] = {"type": ["string", "number", "boolean"]}
QUANTITY: dict[str, Any] = {"type": ["string", "number", "null"]}
ANY_OBJ: dict[str, Any] = {"type": ["object", "null"]}
SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}
#: A duration (the step runtime's ``parse_duration``): seconds, or number-unit parts such as 10m, 90s, 1h30m.
DURATION_PATTERN = r"^\s*(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ms|s|m|h|d)?)+\s*$"


def obj(props: dict[str, Any], desc: str = "", required: list[str] | None = None) -> dict[str, Any]:
    """A closed object (unknown keys rejected), also accepting null (an empty YAML key)."""
    out: dict[str, Any] = {"type": ["object", "null"], "additionalProperties": False, "properties": props}
    if desc:
        out["description"] = desc
    if required:
        out["required"] = required
    return out


def arr(items: dict[str, Any], desc: str = "", **extra: Any) -> dict[str, Any]:
    """An array (or null) of ``items``."""
    out: dict[str, Any] = {"type": ["array", "null"], "items": items, **extra}
    if desc:
        out["description"] = desc
    return out


ENV_ITEM = obj(
    {"name": {"type": "string", "minLength": 1}, "value": {"type": ["string", "number", "boolean", "null"]}},
    required=["name"],
)
ENV = arr(ENV_ITEM, "Container env [{name, value}]; values go through Helm tpl.")
LINES = arr({"type": ["string", "number", "boolean"]}, "Shell lines.")
RESOURCE_MAP = {
    "type": ["object", "null"],
    "additionalProperties": QUANTITY,
    "description": "cpu, memory, nvidia.com/gpu, vpc.amazonaws.com/efa, aws.amazon.com/neuron, ...",
}
REQ_LIM = obj({"requests": RESOURCE_MAP, "limits": RESOURCE_MAP})
TOLERATION = obj(
    {
        "key": S,
        "operator": {"type": ["string", "null"], "enum": ["Exists", "Equal", None]},
        "value": {"type": ["string", "number", "boolean", "null"]},
        "effect": {
            "type": ["string", "null"],
            "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute", "", None],
        },
        "toleration_seconds": INT,
    }
)
PORT = {"type": ["integer", "string"], "pattern": "^[0-9]+$", "minimum": 1, "maximum": 65535}
PORTS_LIST = arr(obj({"name": {"type": "string", "maxLength": 15}, "value": PORT, "port": PORT}, required=["name"]))
PROBE = obj(
    {
        "period_secs": POS,
        "failure_threshold": POS,
        "initial_delay_secs": INT,
        "timeout_secs": POS,
        "path": S,
        "port": {"type": ["string", "integer", "null"]},
        "enabled": BOOL,
    }
)

COMMON: dict[str, Any] = {
    "global": {"type": "object"},
    "mlrecipe-lib": {
        "type": "object",
        "properties": {
            "training_api": {"type": ["string", "null"], "enum": ["v1", "v2", None],
                             "description": "v2: the PyTorchJob charts render a Kubeflow Trainer v2 TrainJob."},
            "training_runtime": {"type": ["string", "null"], "minLength": 1,
                                 "description": "The ClusterTrainingRuntime a TrainJob references."},
        },
        "description": "Filled by mlrecipe: pipeline_env, secret_env, training_api, training_runtime.",
    },
    "image": {
        "anyOf": [S, obj({"name": S, "pull_policy": S})],
        "description": "Image, or {name, pull_policy}.",
    },
    "image_pull_policy": {"type": ["string", "null"], "enum": ["Always", "IfNotPresent", "Never", None]},
    "step_name": {
        "type": ["string", "null"],
        "maxLength": 63,
        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        "description": "Step name (label mlrecipe.io/step, MLRECIPE_STEP).",
    },
    "backoff_limit": INT,
    "watchdog": obj(
        {
            "hang_timeout": {"type": ["string", "number"], "pattern": DURATION_PATTERN,
                             "description": "No progress for this long is a hang (10m, 90s, 1h30m; a number: s)."},
            "on_hang": {"type": ["string", "null"], "enum": ["fail", "restart", None]},
            "max_restarts": {"type": ["integer", "null"], "minimum": 0, "maximum": 100},
        },
        "Hang detection by the step runtime: stacks of every node on a hang, then fail or restart.",
        required=["hang_timeout"],
    ),
    "network_check": {
        "anyOf": [
            {"type": ["boolean", "null"]},
            obj({"min_ratio": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 10},
                 "node_type": S}, "Fabric check settings."),
        ],
        "description": "Fabric check before the command: true or {min_ratio, node_type}.",
    },
    "framework": S,
    "resources": obj(
        {
            "requests": RESOURCE_MAP,
            "limits": RESOURCE_MAP,
            "resources": REQ_LIM,
            "nnodes": POS,
            "num_nodes": POS,
            "nproc_per_node": {"type": ["integer", "string", "null"]},
            "procs_per_node": POS,
            "node_type": S,
            "node_instance_type": S,
            "min_replicas": INT,
            "max_replicas": INT,
            "num_of_hosts": POS,
        }
    ),
    "tolerations": arr(TOLERATION, "Tolerations [{key, operator, value, effect}]."),
    "pvc": arr(
        obj({"name": {"type": "string"}, "mount_path": {"type": "string"}}, required=["name", "mount_path"]),
        "PersistentVolumeClaims [{name, mount_path}].",
    ),
    "ebs": obj({"storage": QUANTITY, "mount_path": S, "storage_class": S}, "Generic ephemeral EBS volume."),
    "shm_size": QUANTITY,
    "git": obj({"repo_url": S, "branch": S, "commit": S}),
    "inline_script": LINES,
    "pre_script": LINES,
    "post_script": LINES,
    "kueue": obj({"queue_name": S, "priority_class": S}, "Kueue queue-name / priority-class labels."),
    "hyperpod": obj({"enabled": BOOL, "auto_restart": BOOL, "max_retry": POS, "tolerations": arr(TOLERATION)},
                    "SageMaker HyperPod overlay."),
    "sagemaker": obj(
        {"inputs": arr(obj({"name": {"type": "string", "pattern": "^[A-Za-z0-9.\\-_]+$"},
                            "uri": {"type": "string", "pattern": "^(s3|file)://"}}, required=["name", "uri"])),
         "model_from": S, "model_data": S},
        "SageMaker backend: the training job's data channels [{name, uri}]; an endpoint's model_from (an earlier "
        "step) or model_data (an archive URI) (ignored by the Kubernetes charts).",
    ),
    "scheduler_name": S,
    "node_selector": {
        "type": ["object", "null"],
        "additionalProperties": {"type": ["string", "number", "boolean"]},
    },
    "launcher": {
        "type": ["object", "null"],
        "description": "mlrecipe launcher block (expanded by mlrecipe).",
    },
}


def block(desc: str) -> dict[str, Any]:
    """A command block {env, command, args}."""
    return obj({"env": ENV, "command": LINES, "args": LINES}, desc)


MPIRUN = obj(
    {
        "env": ENV,
        "args": LINES,
        "resources": REQ_LIM,
        "launcher_node_type": S,
        "worker_command": LINES,
        "worker_args": LINES,
        "spread_workers": BOOL,
    },
    "mpirun launcher settings.",
)
RAY = obj(
    {
        "version": {"type": ["string", "number", "null"]},
        "dashboard": obj({"host": S}),
        "ports": PORTS_LIST,
        "resources": obj({"requests": RESOURCE_MAP, "limits": RESOURCE_MAP, "node_type": S}),
        "runtime_env_yaml": {"type": ["string", "object", "null"]},
        "ttl_seconds_after_finished": INT,
        "serve_config_v2": {"type": ["string", "object", "null"]},
        "service_unhealthy_threshold_secs": INT,
        "deployment_unhealthy_threshold_secs": INT,
        "env": ENV,
        "tolerations": arr(TOLERATION),
        "restart_policy": obj({"head": S, "worker": S}),
        "logging": obj({"sidecar": obj({"enabled": BOOL, "image": S})}),
    },
    "KubeRay settings.",
)
SERVER = obj(
    {
        "name": S,
        "env": ENV,
        "command": LINES,
        "args": LINES,
        "ports": {
            "anyOf": [PORTS_LIST, {"type": "object", "additionalProperties": PORT}],
            "description": "[{name, value}] or {http: 8000, grpc: 8001, metrics: 8002}.",
        },
        "readiness_probe": PROBE,
        "startup_probe": PROBE,
        "liveness_probe": PROBE,
        "autoscaling": obj({"minReplicas": INT, "maxReplicas": INT, "metrics": arr({"type": "object"})}),
        "resources": REQ_LIM,
    },
    "The server command block, ports, probes and autoscaling.",
)
NO_TOKEN = {
    "not": {
        "required": ["name"],
        "properties": {"name": {"enum": ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACEHUB_API_TOKEN"]}},
    },
    "description": "The hub token comes from hf_secret_name, never inline.",
}


def _with_no_token(env: dict[str, Any]) -> dict[str, Any]:
    env = copy.deepcopy(env)
    env["items"] = {"allOf": [env["items"], NO_TOKEN]}
    return env


SPECIFIC: dict[str, dict[str, Any]] = {
    "training/pytorchjob-distributed": {"train": block("Training command block.")},
    "training/pytorchjob-elastic": {
        "train": block("Training command block."),
        "elastic_policy": obj(
            {
                "rdzv_backend": S,
                "rdzv_port": POS,
                "min_replicas": POS,
                "max_replicas": POS,
                "max_restarts": INT,
            },
            "PyTorchJob elasticPolicy.",
        ),
    },
    "training/mpijob": {"train": block("Command run on every MPI rank."), "mpirun": MPIRUN},
    "training/raytrain": {"train": block("Ray job driver command."), "ray": RAY},
    "data-prep/data-process": {
        "process": block("Processing command block."),
        "master_port": POS,
        "ttl_seconds_after_finished": INT,
    },
    "data-prep/mpijob-data-process": {"process": block("Command run on every MPI rank."), "mpirun": MPIRUN},
    "data-prep/ray-data-process": {"process": block("Ray job driver command."), "ray": RAY},
    "model-prep/hf-snapshot": {
        "process": obj({"env": _with_no_token(ENV), "command": LINES, "args": LINES}),
        "env": _with_no_token(ENV),
        "hf_model_id": S,
        "hf_revision": S,
        "hf_tensors": BOOL,
        "hf_secret_name": S,
        "hf_secret_key": S,
        "ttl_seconds_after_finished": INT,
        "snapshot": obj(
            {
                "dir": S,
                "user": {"type": ["string", "integer", "null"]},
                "group": {"type": ["string", "integer", "null"]},
            }
        ),
    },
    "serving/rayserve": {
        "ray": RAY,
        "engine": obj({"config": ANY_OBJ, "code": {"type": ["string", "object", "null"]}}, "Engine configuration."),
        "git": obj({"repo_url": {"type": "null"}, "branch": S, "commit": S}, "Not used by RayService."),
        "inline_script": arr({"type": "string"}, "Not used by RayService.", maxItems=0),
        "pre_script": arr({"type": "string"}, "Not used by RayService.", maxItems=0),
        "post_script": arr({"type": "string"}, "Not used by RayService.", maxItems=0),
    },
    "serving/triton-inference-server": {"server": SERVER},
    "serving/triton-inference-server-lws": {
        "server": SERVER,
        "lws": obj(
            {
                "size": POS,
                "worker_mode": {"type": ["string", "null"], "enum": ["idle", "runtime", None]},
                "master_port": POS,
                "rbac": BOOL,
            },
            "LeaderWorkerSet settings.",
        ),
    },
    "serving/djl-lmi-server": {"server": SERVER},
    "serving/generic-server": {"server": SERVER},
    "serving/sagemaker-endpoint": {"server": obj(
        {"name": S, "env": ENV, "command": LINES, "args": LINES},
        "The model container: env (the Model's Environment); command/args are not used by SageMaker hosting.",
    )},
    "training/mpijob-horovod-tensorflow-gpu": {
        "train": block("Command run on every MPI rank."),
        "mpirun": MPIRUN,
        "resources": obj(
            {
                **COMMON["resources"]["properties"],
                "gpu_nodes": POS,
                "gpus_per_node": POS,
                "gpu_instance_type": S,
            }
        ),
        "horovod": obj({"autotune": SCALAR, "log_level": SCALAR}, "HOROVOD_AUTOTUNE, HOROVOD_LOG_LEVEL."),
        "nccl": obj({"ifname": SCALAR, "debug_level": SCALAR}, "NCCL_SOCKET_IFNAME, NCCL_DEBUG."),
        "tensorflow": obj(
            {k: SCALAR for k in ("sys_memory_mb", "autotune_threshold", "cpp_min_log_level", "mixed_precision",
                                 "gpu_allocator")},
            "TF_* settings exported to every rank.",
        ),
    },
    "testing/jupyter": {
        "server": block("Jupyter command override (default: jupyter lab with TLS)."),
        "global": {
            "type": "object",
            "properties": {
                "name": S,
                "namespace": S,
                "shared_fs": {"type": ["string", "null"], "pattern": "^[a-z0-9][-a-z0-9]*$"},
                "shared_pvc": S,
                "source_cidr": {"type": ["string", "null"], "pattern": "^[0-9a-fA-F.:]+/[0-9]{1,3}$"},
                "log_dir": S,
            },
            "description": "shared_fs (mount /<shared_fs>), shared_pvc, source_cidr, log_dir (under /<shared_fs>).",
        },
        "jupyter": obj(
            {"name": S, "port": PORT, "target_port": PORT, "gpu_instance_type": S, "token_secret": S, "root_dir": S},
            "Jupyter Lab container and Service port.",
        ),
        "tensorboard": obj(
            {"name": S, "port": PORT, "target_port": PORT, "upstream_port": PORT},
            "TensorBoard: Service port, proxy port, TensorBoard's own port.",
        ),
        "nginx": obj(
            {
                "name": S,
                "image": S,
                "ssl_certificate": S,
                "ssl_certificate_key": S,
                "tls_secret": S,
                "user": S,
                "htpasswd": {"type": ["string", "null"], "pattern": "^[^:\\s]+$",
                             "description": "Password hash (htpasswd -nbm, openssl passwd -apr1), never the password."},
                "htpasswd_secret": S,
            },
            "TLS and basic-auth proxy in front of TensorBoard.",
        ),
    },
}
CATALOG: list[str] = list(SPECIFIC)


def chart_schema(catalog_name: str) -> dict[str, Any]:
    """The values schema of one chart."""
    props = {**copy.deepcopy(COMMON), **copy.deepcopy(SPECIFIC[catalog_name])}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"mlrecipe chart {catalog_name} values",
        "type": "object",
        "additionalProperties": False,
        "properties": dict(sorted(props.items())),
    }


def schema_text(catalog_name: str) -> str:
    """The file content of one chart's values.schema.json."""
    return json.dumps(chart_schema(catalog_name), indent=2) + "\n"


def write_all(root: Path | None = None) -> list[Path]:
    """Write every chart's values.schema.json; returns the paths written."""
    base = root or charts_root()
    paths = []
    for name in CATALOG:
        path = base / name / "values.schema.json"
        path.write_text(schema_text(name), encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all():
        sys.stdout.write(f"wrote {p}\n")
