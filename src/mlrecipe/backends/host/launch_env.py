"""The launch environment host backends add for devices and MPI (the same on a laptop and a Slurm node)."""

from __future__ import annotations

#: Open MPI as root and with more ranks than cores (a laptop, the Slurm test cluster).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


def device_env(uses_gpus: bool) -> dict[str, str]:
    """``MLRECIPE_DEVICE`` for the step's scripts; on CPU, accelerate is told so (``ACCELERATE_USE_CPU``)."""
    return {"MLRECIPE_DEVICE": "cuda"} if uses_gpus else {"MLRECIPE_DEVICE": "cpu", "ACCELERATE_USE_CPU": "1"}


def mpi_env() -> dict[str, str]:
    return dict(MPI_ENV)
