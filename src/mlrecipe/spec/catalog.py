"""The chart catalog: each step names a chart, which gives its kind and launch semantics.

Names follow the reference system (``training/pytorchjob-distributed`` ...). A chart may also be
named by a path that ends with a catalog name (``charts/machine-learning/training/mpijob``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import Enum

from mlrecipe.errors import UnknownChartError


class StepKind(str, Enum):
    """How a step's nodes are launched; backends declare which kinds they run."""

    TORCH = "torch"  # PyTorchJob: fixed nnodes, static master address
    TORCH_ELASTIC = "torch-elastic"  # PyTorchJob with elasticPolicy: c10d rendezvous
    MPI = "mpi"  # MPIJob: one launcher runs mpirun over the workers
    RAY = "ray"  # RayJob: a Ray cluster runs the command as a job
    JOB = "job"  # Job / Indexed Job: nnodes independent ranks
    SERVER = "server"  # long-running server, ready on its health check
    ENDPOINT = "endpoint"  # a managed endpoint (SageMaker Model + EndpointConfig + Endpoint), ready when InService


@dataclass(frozen=True)
class ChartInfo:
    """What mlrecipe knows of one catalog chart."""

    name: str
    kind: StepKind
    block: str
    extra_blocks: frozenset[str]
    summary: str
    needs_command: bool = True
    #: How backends that run processes on hosts (local, Slurm) start this chart when its command is not
    #: the recipe's own: the name of a host launch (``ray-serve``: the RayService's Serve config run by
    #: ``python -m mlrecipe.serve.rayserve``; ``ray-job``: a Ray cluster on the host, the recipe's command as its
    #: driver); ``None`` runs the recipe's command.
    host_launch: str | None = None
    #: The health path a server chart is ready on when its recipe sets no probe.
    health_path: str = "/health"
    #: Python packages (import names) the environment running this chart on a host must have.
    host_needs: tuple[str, ...] = ()
    #: The ``framework:`` the chart's values.yaml selects when a recipe names none.
    default_framework: str | None = None
    #: Whether the chart's server answers over TLS (a self-signed certificate on hosts).
    tls: bool = False
    #: Whether the chart serves with NVIDIA Triton (hosts run nvidia-pytriton's tritonserver, python backend only).
    triton: bool = False
    #: The Ray worker group's name (the chart's ``groupName``) of a RayJob chart.
    ray_worker_group: str = "workers"

    @property
    def category(self) -> str:
        return self.name.split("/", 1)[0]


def _chart(name: str, kind: StepKind, block: str, summary: str, *extra: str) -> ChartInfo:
    return ChartInfo(name, kind, block, frozenset(extra), summary, needs_command=kind is not StepKind.SERVER)


CATALOG: dict[str, ChartInfo] = {
    c.name: c
    for c in (
        _chart("training/pytorchjob-distributed", StepKind.TORCH, "train",
               "PyTorchJob: torchrun/accelerate DDP, FSDP, DeepSpeed, Megatron, NeMo, Neuronx"),
        _chart("training/pytorchjob-elastic", StepKind.TORCH_ELASTIC, "train",
               "PyTorchJob with an elastic policy (c10d rendezvous, restarts)", "elastic_policy"),
        _chart("training/mpijob", StepKind.MPI, "train", "MPIJob: mpirun over workers (Horovod, MPI)",
               "mpirun"),
        ChartInfo("training/raytrain", StepKind.RAY, "train", frozenset({"ray"}), "RayJob: Ray Train on a Ray cluster",
                  host_launch="ray-job", host_needs=("ray",), default_framework="ray_train",
                  ray_worker_group="training"),
        _chart("data-prep/data-process", StepKind.JOB, "process",
               "Job (Indexed Job when nnodes > 1) running a processing command"),
        _chart("data-prep/mpijob-data-process", StepKind.MPI, "process", "MPIJob running a processing command",
               "mpirun"),
        ChartInfo("data-prep/ray-data-process", StepKind.RAY, "process", frozenset({"ray"}),
                  "RayJob running Ray Data processing", host_launch="ray-job", host_needs=("ray",)),
        ChartInfo("model-prep/hf-snapshot", StepKind.JOB, "process", frozenset({"snapshot"}),
                  "Job that snapshots a Hugging Face model onto the shared volume (its own script by default)",
                  needs_command=False),
        ChartInfo("serving/rayserve", StepKind.SERVER, "server", frozenset({"ray", "engine"}),
                  "RayService: Ray Serve with a vLLM engine", needs_command=False, host_launch="ray-serve",
                  health_path="/-/healthz", host_needs=("ray", "mlrecipe"), default_framework="vllm-0.19.0"),
        ChartInfo("serving/triton-inference-server", StepKind.SERVER, "server", frozenset(),
                  "Triton Inference Server (vLLM, TensorRT-LLM or Python backend)", needs_command=False,
                  health_path="/v2/health/ready", triton=True),
        ChartInfo("serving/triton-inference-server-lws", StepKind.SERVER, "server", frozenset(),
                  "Triton on a LeaderWorkerSet for multi-node serving", needs_command=False,
                  health_path="/v2/health/ready", triton=True),
        _chart("serving/djl-lmi-server", StepKind.SERVER, "server", "DJL Large Model Inference server"),
        _chart("serving/generic-server", StepKind.SERVER, "server", "Any HTTP server with probes and ports"),
        ChartInfo("serving/sagemaker-endpoint", StepKind.ENDPOINT, "server", frozenset(),
                  "SageMaker real-time endpoint (Model, EndpointConfig, Endpoint) serving an earlier step's "
                  "model_artifacts (sagemaker backend only)", needs_command=False, health_path="/ping"),
        _chart("training/mpijob-horovod-tensorflow-gpu", StepKind.MPI, "train",
               "MPIJob: Horovod + TensorFlow on GPU nodes (the Mask R-CNN tutorial's keys)",
               "mpirun", "horovod", "nccl", "tensorflow"),
        ChartInfo("testing/jupyter", StepKind.SERVER, "server", frozenset({"jupyter", "tensorboard", "nginx"}),
                  "Jupyter Lab + TensorBoard behind TLS and a password, to look at a trained model",
                  needs_command=False, host_launch="jupyter", health_path="/api", tls=True,
                  host_needs=("jupyterlab", "tensorboard", "mlrecipe")),
    )
}

CHART_SPECIFIC_BLOCKS = frozenset({"elastic_policy", "mpirun", "ray", "engine", "snapshot", "jupyter", "tensorboard",
                                   "nginx", "horovod", "nccl", "tensorflow"})


def normalize_chart_name(name: str) -> str:
    """Map a catalog name or a path ending in one to the catalog name (unchanged if unknown)."""
    cleaned = name.strip().rstrip("/")
    if cleaned in CATALOG:
        return cleaned
    parts = cleaned.split("/")
    if len(parts) >= 2 and "/".join(parts[-2:]) in CATALOG:
        return "/".join(parts[-2:])
    return cleaned


def lookup(name: str) -> ChartInfo:
    """Return the catalog entry for ``name``; raise :class:`UnknownChartError` with suggestions."""
    key = normalize_chart_name(name)
    if key in CATALOG:
        return CATALOG[key]
    close = difflib.get_close_matches(key, CATALOG, n=1, cutoff=0.5)
    hint = f" (did you mean '{close[0]}'?)" if close else f"; known charts: {', '.join(sorted(CATALOG))}"
    raise UnknownChartError(f"unknown chart '{name}'{hint}")
