"""Prints this process's Open MPI rank and world size, as one write (ranks share the log; with ``python -u`` each
part of a multi-argument ``print`` is its own write, and another rank's line can land between them)."""

import os
import sys

if __name__ == "__main__":
    sys.stdout.write(f"mpi-rank {os.environ['OMPI_COMM_WORLD_RANK']} of {os.environ['OMPI_COMM_WORLD_SIZE']}\n")
    sys.stdout.flush()
