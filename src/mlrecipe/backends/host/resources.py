"""Read the recipe's Kubernetes-style ``resources`` as numbers: CPUs, memory, GPUs and Neuron devices per node.

``requests`` win over ``limits`` (a Slurm allocation, a local slice are requests); values are per node, as on a
pod. The Slurm backend maps them to sbatch options, the local backend to each node's device slice.
"""

from __future__ import annotations

import math
import re

from mlrecipe.errors import ResourceError
from mlrecipe.spec.recipe import Resources

__all__ = ["ResourceError", "cpus", "gpus", "memory_mb", "neuron_cores", "neuron_devices", "unmapped"]

GPU_KEYS = ("nvidia.com/gpu", "amd.com/gpu", "gpu")
NEURON_DEVICE_KEYS = ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice")
NEURON_CORE_KEY = "aws.amazon.com/neuroncore"
_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?\s*$")


def _value(resources: Resources, key: str) -> str | int | float | None:
    for source in (resources.requests, resources.limits):
        if key in source:
            return source[key]
    return None


def _parse(quantity: str | int | float, key: str) -> float:
    value = _number(quantity, key)
    if not math.isfinite(value):
        raise ResourceError(f"resources {key}: quantity too large ({len(str(quantity))} characters)")
    return value


def _number(quantity: str | int | float, key: str) -> float:
    if isinstance(quantity, int | float):
        try:
            return float(quantity)
        except OverflowError:
            return math.inf
    m = _QUANTITY.match(str(quantity))
    if m is None:
        shown = str(quantity) if len(str(quantity)) <= 40 else f"{str(quantity)[:37]}..."
        raise ResourceError(f"resources {key}: cannot read quantity {shown!r}")
    number, suffix = float(m.group(1)), m.group(2) or ""
    if suffix == "m":
        return number / 1000
    return number * _SUFFIX[suffix]


def cpus(resources: Resources) -> int | None:
    """CPUs per node (``cpu: 500m`` rounds up to 1)."""
    raw = _value(resources, "cpu")
    return None if raw is None else max(1, math.ceil(_parse(raw, "cpu") - 1e-9))


def memory_mb(resources: Resources) -> int | None:
    """Memory per node in MiB (Slurm's ``--mem`` unit)."""
    raw = _value(resources, "memory")
    return None if raw is None else max(1, math.ceil(_parse(raw, "memory") / 2**20))


def gpus(resources: Resources) -> int | None:
    """GPUs per node."""
    return _count(resources, GPU_KEYS)


def _count(resources: Resources, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        raw = _value(resources, key)
        if raw is not None:
            return int(_parse(raw, key))
    return None


def neuron_devices(resources: Resources) -> int | None:
    """Neuron devices per node (``aws.amazon.com/neuron`` or ``neurondevice``)."""
    return _count(resources, NEURON_DEVICE_KEYS)


def neuron_cores(resources: Resources) -> int | None:
    """NeuronCores per node (``aws.amazon.com/neuroncore``)."""
    return _count(resources, (NEURON_CORE_KEY,))


def unmapped(resources: Resources) -> list[str]:
    """Resource names with no Slurm equivalent (reported as notes)."""
    known = {"cpu", "memory", *GPU_KEYS}
    return sorted({*resources.requests, *resources.limits} - known)
