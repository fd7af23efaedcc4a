"""Which devices each node of a local step sees: one contiguous slice of GPUs (or NeuronCores) per node.

The slice is sized by the recipe's per-node request (``nvidia.com/gpu``; ``aws.amazon.com/neuron*``), else,
under ``gpus: auto``, by ``nproc_per_node`` for training and serving steps (one GPU per process, taken only
when free). A node's processes see only its slice (``CUDA_VISIBLE_DEVICES``, ``NEURON_RT_VISIBLE_CORES``), so
``LOCAL_RANK`` indexes into it and ranks of different nodes never share a GPU unless ``share_gpus`` says so.
A step with no GPU runs on CPU (``CUDA_VISIBLE_DEVICES`` empty, ``ACCELERATE_USE_CPU``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mlrecipe.backends.host import resources
from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.launch_env import device_env
from mlrecipe.backends.local.options import LocalOptions
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec
from mlrecipe.spec.recipe import Resources

#: Step kinds that take one GPU per process under ``gpus: auto`` when they request none.
AUTO_KINDS = frozenset({StepKind.TORCH, StepKind.TORCH_ELASTIC, StepKind.MPI, StepKind.SERVER})


@dataclass(frozen=True)
class Demand:
    """What a step asks of the devices: nodes, GPUs per node, and whether the recipe asked explicitly."""

    nodes: int
    per_node: int
    requested: bool
    neuron_cores: int = 0  #: NeuronCores per node

    @property
    def total(self) -> int:
        return self.nodes * self.per_node


def _server_resources(step: StepSpec) -> Resources | None:
    nested = step.recipe.resources.resources
    return Resources.model_validate(nested) if isinstance(nested, dict) else None


def demand(step: StepSpec, options: LocalOptions) -> Demand:
    """The step's device demand on this backend (``nodes`` counts every node an elastic step may reach)."""
    res = step.recipe.resources
    policy = step.recipe.elastic_policy
    nodes = max(res.nnodes, (policy.max_replicas or 0) if policy else 0)
    nproc = (policy.nproc_per_node if policy and policy.nproc_per_node else None) or res.nproc_per_node
    nested = _server_resources(step)
    gpus = resources.gpus(res)
    if gpus is None and nested is not None:
        gpus = resources.gpus(nested)
    cores = resources.neuron_cores(res) or 0
    devices = resources.neuron_devices(res) or 0
    cores = cores or devices * options.neuron_cores_per_device
    if options.gpus == "cpu":
        return Demand(nodes, 0, gpus is not None and gpus > 0)
    if gpus is not None:
        return Demand(nodes, gpus, gpus > 0, cores)
    if options.gpus == "auto" and step.chart.kind in AUTO_KINDS and not cores:
        return Demand(nodes, nproc, False, cores)
    return Demand(nodes, 0, False, cores)


def fit_problems(step: StepSpec, options: LocalOptions, visible: list[Gpu], neuron_cores: int) -> list[str]:
    """Why the step's explicit request cannot fit this machine (exit 2 before anything starts), or ``[]``."""
    want = demand(step, options)
    problems = []
    if want.requested and want.per_node and (visible or options.gpus == "strict"):
        problems += _gpu_problems(want, options, visible)
    if want.neuron_cores and want.nodes * want.neuron_cores > neuron_cores and neuron_cores:
        problems.append(
            f"resources: {want.nodes} node(s) x {want.neuron_cores} NeuronCore(s) = "
            f"{want.nodes * want.neuron_cores}, but this machine has {neuron_cores}; lower resources.nnodes or "
            "the aws.amazon.com/neuron request")
    return problems


def _gpu_problems(want: Demand, options: LocalOptions, visible: list[Gpu]) -> list[str]:
    have = len(visible)
    shown = ", ".join(g.describe() for g in visible) or "none (no nvidia-smi, or it lists no GPU)"
    arithmetic = (f"resources: {want.nodes} node(s) x {want.per_node} GPU(s) per node (nvidia.com/gpu) = "
                  f"{want.total} GPU(s), but {have} {'is' if have == 1 else 'are'} visible on this machine "
                  f"[{shown}]")
    if want.per_node > have:
        return [f"{arithmetic}: one node alone needs {want.per_node}; lower the request (e.g. --set "
                f"resources.limits.nvidia\\.com/gpu={max(have, 1)}), or run it on CPU with --backend-opt gpus=cpu"]
    if want.total > have and not options.share_gpus:
        fewer = max(1, have // want.per_node)
        return [f"{arithmetic}; lower resources.nnodes (e.g. --set resources.nnodes={fewer}) or the GPUs per node, "
                "let the nodes share GPUs with --backend-opt share_gpus=true (NCCL refuses two ranks on one GPU: "
                "for gloo or one process per node), or run it on CPU with --backend-opt gpus=cpu"]
    return []


@dataclass
class DevicePlan:
    """The devices of each launched node of a local step, the GPUs to lease, and what to tell the user."""

    nodes: list[tuple[Gpu, ...]]
    neuron_cores: list[tuple[int, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    shared: bool = False
    wait: bool = True  #: an explicit request waits for busy GPUs; an automatic one was planned on free ones

    @property
    def lease(self) -> tuple[Gpu, ...]:
        """Every GPU the step holds while it runs (each once)."""
        seen: dict[int, Gpu] = {}
        for node in self.nodes:
            for gpu in node:
                seen.setdefault(gpu.index, gpu)
        return tuple(seen.values())

    def node_env(self, rank: int) -> dict[str, str]:
        """The device variables of launched node ``rank``."""
        gpus = self.nodes[rank] if rank < len(self.nodes) else ()
        env = device_env(bool(gpus))
        if gpus:
            ids = ",".join(str(g.index) for g in gpus)
            env.update(CUDA_VISIBLE_DEVICES=ids, CUDA_DEVICE_ORDER="PCI_BUS_ID", MLRECIPE_GPU_IDS=ids,
                       MLRECIPE_MIXED_PRECISION="bf16" if all(g.supports_bf16 for g in gpus) else "fp16")
            if self.shared:
                env["MLRECIPE_SHARED_GPUS"] = "1"
        elif self.nodes:  # a GPU machine: this step's processes see no GPU
            env["CUDA_VISIBLE_DEVICES"] = ""
        cores = self.neuron_cores[rank] if rank < len(self.neuron_cores) else ()
        if cores:
            env["NEURON_RT_VISIBLE_CORES"] = f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
        return env


def _window(visible: list[Gpu], size: int, free: Callable[[Gpu], bool]) -> list[Gpu] | None:
    """The first ``size`` consecutive visible GPUs that are all free, else ``None``."""
    for start in range(len(visible) - size + 1):
        block = visible[start:start + size]
        if all(free(g) for g in block):
            return block
    return None


def _split(gpus: list[Gpu], nodes: int, per_node: int, visible: list[Gpu]) -> list[tuple[Gpu, ...]]:
    if len(gpus) >= nodes * per_node:
        return [tuple(gpus[i * per_node:(i + 1) * per_node]) for i in range(nodes)]
    ring = [visible[(visible.index(gpus[0]) + k) % len(visible)] for k in range(nodes * per_node)]
    return [tuple(ring[i * per_node:(i + 1) * per_node]) for i in range(nodes)]


def plan_devices(step: StepSpec, options: LocalOptions, visible: list[Gpu], free: Callable[[Gpu], bool],
                 launches: int, neuron_total: int = 0) -> DevicePlan:
    """Slice the visible GPUs for the step's nodes (``launches``: 1 for MPI, whose mpirun starts every rank).

    An explicit request takes the first contiguous block of free GPUs (or, all busy, the first block: the
    step waits for it at submit); an automatic one takes free GPUs only, else runs on CPU.
    """
    want = demand(step, options)
    name = step.name
    if want.requested and options.gpus == "cpu":
        plan = DevicePlan([() for _ in range(launches)] if visible else [])
        plan.notes.append(f"step {name} asks for GPUs; --backend-opt gpus=cpu runs it on CPU")
        return plan
    if not want.per_node or not visible:
        plan = DevicePlan([() for _ in range(launches)] if visible else [])
        if want.requested:
            plan.notes.append(f"step {name} asks for {want.per_node} GPU(s) per node but this machine has none: it "
                              "runs on CPU (--backend-opt gpus=strict refuses such steps instead)")
        elif visible:
            plan.notes.append(f"step {name} asks for no GPU: it runs on CPU (CUDA_VISIBLE_DEVICES is empty)")
        return _with_neuron(plan, want, launches, neuron_total)
    shared = want.requested and options.share_gpus and want.total > len(visible)
    size = len(visible) if shared else want.total
    block = _window(visible, size, free)
    if block is None and not want.requested:
        plan = DevicePlan([() for _ in range(launches)])
        plan.notes.append(f"step {name} asks for no GPU; {want.nodes} node(s) x {want.per_node} process(es) would "
                          f"take {want.total} GPU(s) and fewer are free here: it runs on CPU (request nvidia.com/gpu "
                          "to have it wait for GPUs, or lower resources.nnodes)")
        return plan
    block = block or visible[:size]
    per_node = _split(block, want.nodes, want.per_node, visible)
    nodes = per_node if launches == want.nodes else [tuple(g for node in per_node for g in node)] * launches
    plan = DevicePlan(nodes, shared=shared, wait=want.requested)
    how = "as requested" if want.requested else "one per process (gpus: auto)"
    shown = "; ".join(f"node {i}: GPU {','.join(str(g.index) for g in node)}" for i, node in enumerate(per_node))
    plan.notes.append(f"step {name} runs on GPUs, {how}: {shown}" + (" (nodes share GPUs: share_gpus)" if shared
                                                                      else ""))
    return _with_neuron(plan, want, launches, neuron_total)


def _with_neuron(plan: DevicePlan, want: Demand, launches: int, neuron_total: int) -> DevicePlan:
    if not want.neuron_cores or not neuron_total:
        return plan
    per = want.neuron_cores
    cores = [tuple(range(i * per, (i + 1) * per)) for i in range(want.nodes)]
    plan.neuron_cores = cores if launches == want.nodes else [tuple(c for node in cores for c in node)]
    plan.notes.append("NeuronCores per node: " + "; ".join(f"node {i}: {c[0]}-{c[-1]}" for i, c in enumerate(cores)))
    return plan
