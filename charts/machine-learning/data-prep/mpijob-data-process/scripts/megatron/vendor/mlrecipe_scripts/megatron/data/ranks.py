"""Which rank does what: rank and size from the environment, file-number lists, the contiguous split.

The split is NeMo-Framework-Launcher's (``split_list`` of its ``file_utils``): the sorted, de-duplicated file
numbers are cut into ``size`` contiguous groups, rank ``k`` taking ``numbers[k*n // size : (k+1)*n // size]`` of
the ``n`` numbers, so the groups differ by at most one file and, with more ranks than files, the files are spread
over the ranks (and so over the nodes) rather than given to the first ones.
Examples: 0-5 over 4 ranks -> [0], [1, 2], [3], [4, 5]; 0-17 over 5 -> [0-2], [3-6], [7-9], [10-13], [14-17].
"""

from __future__ import annotations

import os
from dataclasses import dataclass

RANK_VARIABLES = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                  ("RANK", "WORLD_SIZE"))
RUN_ID_VARIABLES = ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
#: Ranks on this node: Open MPI, MPICH/Hydra, torchrun.
LOCAL_SIZE_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE")
#: Set by the user: the tokenizer's threads are theirs to choose.
THREAD_VARIABLES = ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS")


@dataclass(frozen=True)
class World:
    """This process's rank, the number of ranks, and an id shared by the ranks of one launch ("" if unknown)."""

    rank: int
    size: int
    run_id: str = ""


def world(env: dict[str, str] | None = None) -> World:
    """Rank and size from Open MPI (``OMPI_COMM_WORLD_RANK``/``SIZE``), then PMI, then ``RANK``/``WORLD_SIZE``;
    0 of 1 when none is set. The run id comes from the launcher (Open MPI job id, PMIx namespace, Slurm job)."""
    env = dict(os.environ) if env is None else env
    rank, size = 0, 1
    for rank_var, size_var in RANK_VARIABLES:
        if rank_var in env and size_var in env:
            rank, size = int(env[rank_var]), int(env[size_var])
            break
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} of {size} is not a valid MPI rank")
    run_id = next((env[name] for name in RUN_ID_VARIABLES if env.get(name)), "")
    if run_id and env.get("SLURM_STEP_ID") and run_id == env.get("SLURM_JOB_ID"):
        run_id = f"{run_id}.{env['SLURM_STEP_ID']}"
    return World(rank, size, run_id)


def parse_file_numbers(text: str) -> list[int]:
    """``"0-5"``, ``"0,3,7-9"`` -> sorted unique numbers; ValueError with the bad item otherwise."""
    numbers: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise ValueError(f"empty item in file numbers {text!r}")
        lo, sep, hi = item.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(item), int(item))
        except ValueError:
            raise ValueError(f"{item!r} in file numbers {text!r} is not N or N-M") from None
        if first < 0 or last < first:
            raise ValueError(f"{item!r} in file numbers {text!r}: the range is empty or negative")
        numbers.update(range(first, last + 1))
    return sorted(numbers)


def split_contiguous(numbers: list[int], rank: int, size: int) -> list[int]:
    """Rank ``rank``'s contiguous share of ``numbers`` (the module docstring states the rule)."""
    n = len(numbers)
    return numbers[rank * n // size:(rank + 1) * n // size]


def shard_name(number: int) -> str:
    """The Pile's shard stem: two digits (``00`` ... ``29``), wider numbers as they are."""
    return f"{number:02d}"


def tokenizer_threads(env: dict[str, str], workers: int, cpus: int) -> dict[str, str]:
    """The env that gives each tokenizer process its share of this node's ``cpus``: ``tokenizers`` batch-encodes on
    a thread pool as wide as the machine in every process, so 8 ranks x 3 workers on 32 CPUs would run 768 threads.
    The share is ``cpus // (ranks on this node * workers)``: ``RAYON_NUM_THREADS`` when above 1, else
    ``TOKENIZERS_PARALLELISM=false``; nothing when the user set either (or Rayon's older variable)."""
    if any(name in env for name in THREAD_VARIABLES):
        return {}
    local = next((int(env[name]) for name in LOCAL_SIZE_VARIABLES if env.get(name, "").isdigit()), 1)
    share = cpus // max(local * workers, 1)
    return {"RAYON_NUM_THREADS": str(share)} if share > 1 else {"TOKENIZERS_PARALLELISM": "false"}
