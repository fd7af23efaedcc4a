"""Expansion of the structured ``launcher`` block into the command a user would write by hand.

The expansion uses only the env contract (``PET_*``), so the same command runs on every backend. ``mpirun`` is
left out where the step runtime is already an MPI rank: the local and Slurm backends run an MPI step's command once
and its ``mpirun`` starts the ranks, while an MPIJob's launcher runs ``mpirun`` over the step runtime on every slot
(its ``mpirun.args`` apply there; the launcher's ``options`` do not).
"""

from __future__ import annotations

from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.recipe import Launcher

TORCHRUN_STATIC = (
    "--nnodes $PET_NNODES --nproc_per_node $PET_NPROC_PER_NODE --node_rank $PET_NODE_RANK"
    " --master_addr $PET_MASTER_ADDR --master_port $PET_MASTER_PORT"
)
TORCHRUN_ELASTIC = (
    "--nnodes $PET_NNODES --nproc_per_node $PET_NPROC_PER_NODE --rdzv_backend $PET_RDZV_BACKEND"
    " --rdzv_endpoint $PET_RDZV_ENDPOINT --rdzv_id $PET_RDZV_ID --max_restarts ${PET_MAX_RESTARTS:-0}"
)
ACCELERATE = (
    "--num_machines $PET_NNODES --num_processes $((PET_NNODES * PET_NPROC_PER_NODE))"
    " --machine_rank $PET_NODE_RANK --main_process_ip $PET_MASTER_ADDR --main_process_port $PET_MASTER_PORT"
)
#: The node's GPU slice and the precision its devices support, where the backend sets them (local backend).
ACCELERATE_DEVICES = (
    "${MLRECIPE_GPU_IDS:+--gpu_ids $MLRECIPE_GPU_IDS}"
    " ${MLRECIPE_MIXED_PRECISION:+--mixed_precision $MLRECIPE_MIXED_PRECISION}"
)
MPIRUN = "-np $((PET_NNODES * PET_NPROC_PER_NODE)) ${MLRECIPE_HOSTFILE:+--hostfile $MLRECIPE_HOSTFILE}"
#: Already an MPI rank: an MPIJob's launcher (Kubernetes) runs mpirun itself and the step runtime on every slot.
IS_MPI_RANK = '[ -n "${OMPI_COMM_WORLD_SIZE:-}${PMI_SIZE:-}" ]'


def expand_launcher(launcher: Launcher, kind: StepKind) -> tuple[list[str], list[str]]:
    """Return ``(command, args)`` for ``launcher`` on a step of ``kind``."""
    target = (["-m"] if launcher.module else []) + [launcher.script, *launcher.args]
    options = list(launcher.options)
    if launcher.type == "torchrun":
        flags = TORCHRUN_ELASTIC if kind is StepKind.TORCH_ELASTIC else TORCHRUN_STATIC
        return ["torchrun"], [flags, *options, *target]
    if launcher.type == "accelerate":
        multi = "$( [ $((PET_NNODES * PET_NPROC_PER_NODE)) -gt 1 ] && echo --multi_gpu )"
        return ["accelerate", "launch"], [ACCELERATE, multi, ACCELERATE_DEVICES, *options, *target]
    if launcher.type == "mpirun":  # where the backend already started the ranks, each runs the script itself
        return [f"$( {IS_MPI_RANK} || echo mpirun {' '.join([MPIRUN, *options])} )"], ["python3", *target]
    return ["python3"], [*options, *target]
