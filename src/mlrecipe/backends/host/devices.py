"""The accelerators this machine shows: NVIDIA GPUs (``nvidia-smi``) and AWS Neuron devices (``/dev/neuron*``).

GPUs are listed in ``nvidia-smi``'s order (PCI bus order), narrowed to the CLI's own ``CUDA_VISIBLE_DEVICES``
when it is set (indices or UUIDs, as CUDA reads them). Steps then name GPUs by that physical index with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so CUDA and ``nvidia-smi`` agree on which device is which.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

QUERY = ["nvidia-smi", "--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"]
_NEURON_DEVICE = re.compile(r"^neuron\d+$")


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU: its physical index, UUID, model name and compute capability (e.g. 9.0)."""

    index: int
    uuid: str
    name: str
    compute_capability: float | None

    @property
    def supports_bf16(self) -> bool:
        """bf16 arithmetic is native from compute capability 8.0 (Ampere) on."""
        return (self.compute_capability or 0.0) >= 8.0

    def describe(self) -> str:
        return f"GPU {self.index} ({self.name})"


def _read_gpus() -> list[Gpu]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(QUERY, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            capability: float | None = float(parts[3])
        except ValueError:
            capability = None
        gpus.append(Gpu(int(parts[0]), parts[1], parts[2], capability))
    return gpus


def _narrowed(gpus: list[Gpu], visible: str | None) -> list[Gpu]:
    """The GPUs a ``CUDA_VISIBLE_DEVICES`` value leaves, in its order (CUDA stops at the first bad entry)."""
    if visible is None:
        return gpus
    out: list[Gpu] = []
    for entry in (e.strip() for e in visible.split(",")):
        found = next((g for g in gpus if (entry.isdigit() and g.index == int(entry))
                      or (entry and not entry.isdigit() and g.uuid.startswith(entry))), None)
        if found is None or found in out:
            break
        out.append(found)
    return out


def visible_gpus() -> list[Gpu]:
    """The NVIDIA GPUs steps may use here: ``nvidia-smi``'s list narrowed by ``CUDA_VISIBLE_DEVICES``."""
    return _narrowed(_read_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def neuron_devices(dev: Path = Path("/dev")) -> int:
    """How many AWS Neuron devices (``/dev/neuron0`` ...) this machine has."""
    try:
        return sum(1 for p in dev.iterdir() if _NEURON_DEVICE.match(p.name))
    except OSError:
        return 0
