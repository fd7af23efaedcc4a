"""Options of the local backend: the ``local:`` section of the config file, or ``--backend-opt key=value``.

Example::

    local:
      root: /data/mlrecipe-volumes      # where the pvc volumes (/fsx, /efs) live on this machine
      images: {vllm/vllm-openai:latest: /opt/venvs/vllm}
      stop_grace_seconds: 10
      gpus: auto                         # auto | requested | strict | cpu
      gpu_busy: wait                     # a GPU another release holds: wait for it, or refuse the step
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from mlrecipe.backends.base import BackendOptions
from mlrecipe.backends.host.gpu_lease import default_lease_dir
from mlrecipe.config import default_volume_root

RANKS_PER_CPU = 8


class LocalOptions(BackendOptions):
    """Settings of the local backend (each node of a step is a process group on this machine)."""

    root: str | None = Field(
        None, description="Directory holding the pvc volumes, one sub-directory per pvc name "
        "(default $MLRECIPE_HOME/volumes)")
    volumes: Literal["bind", "none"] = Field(
        "bind", description="bind: mount the recipe's pvc paths (/efs, /fsx) from `root` in a private mount "
        "namespace; none: run without mounts (the paths must exist)")
    images: dict[str, str] = Field(
        default_factory=dict, description="Image name -> Python environment (venv prefix) that runs its steps; "
        "$MLRECIPE_IMAGES (image=prefix,...) wins")
    stop_grace_seconds: float = Field(
        10.0, ge=0, description="Seconds between SIGTERM and SIGKILL when a step is stopped")
    master_port: int | None = Field(
        None, ge=1, le=65535, description="PET_MASTER_PORT of every step (default: a free port per step)")
    server_port: int | None = Field(
        None, ge=1, le=65535, description="Port of serving steps (default: a free port; a port pinned in the "
        "recipe's probes wins)")
    max_ranks: int | None = Field(
        None, ge=1, description=f"Most ranks (nnodes x nproc_per_node) one step may start here (default "
        f"{RANKS_PER_CPU} per CPU); a step asking for more is refused before it starts")

    cpus: int | None = Field(
        None, ge=1, description="CPUs the parallel steps of a release share here (default: the CPUs this process "
        "may use): a step (nnodes x nproc_per_node ranks, one CPU each) waits until it fits beside the running "
        "ones; a step always starts when no other runs, and a server does not count")

    gpus: Literal["auto", "requested", "strict", "cpu"] = Field(
        "auto", description="Which steps get GPUs. auto: steps that request nvidia.com/gpu get that many per node "
        "(refused when they do not fit; on a machine without GPUs they run on CPU, with a note), and training and "
        "serving steps that request none get one GPU per process when that many are free (else CPU); requested: "
        "only steps that request GPUs get them; strict: as requested, and a request is refused on a machine "
        "without GPUs too; cpu: every step runs on CPU")
    share_gpus: bool = Field(
        False, description="Let the nodes of a step share GPUs when it requests more than are visible (node i "
        "gets the next GPUs round the ring). NCCL refuses two ranks on one GPU: for gloo or one process per node")
    gpu_busy: Literal["wait", "refuse"] = Field(
        "wait", description="A step whose GPUs another release holds: wait until they are free (the display "
        "says for what), or refuse it")
    gpu_lease_dir: str | None = Field(
        None, description="Directory of the machine-wide GPU lease files, shared by every release and user "
        "(default /tmp/mlrecipe-gpu-leases)")
    neuron_cores_per_device: int = Field(
        2, ge=1, description="NeuronCores per Neuron device (2 on trn1 and inf2), to turn an "
        "aws.amazon.com/neuron request into NEURON_RT_VISIBLE_CORES")

    def lease_dir(self) -> Path:
        return Path(self.gpu_lease_dir).expanduser() if self.gpu_lease_dir else default_lease_dir()

    def volume_root(self) -> Path:
        return Path(self.root).expanduser() if self.root else default_volume_root()

    def cpu_count(self) -> int:
        """The CPUs the parallel steps of a release share (``cpus``, else this process's usable CPUs)."""
        from mlrecipe.backends.host.cpus import usable_cpus

        return self.cpus or usable_cpus()

    def rank_limit(self) -> int:
        return self.max_ranks or RANKS_PER_CPU * (os.cpu_count() or 1)
