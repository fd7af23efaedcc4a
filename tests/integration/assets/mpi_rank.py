"""Prints this process's Open MPI rank and world size."""

import os

if __name__ == "__main__":
    print("mpi-rank", os.environ["OMPI_COMM_WORLD_RANK"], "of", os.environ["OMPI_COMM_WORLD_SIZE"], flush=True)
