"""The Slurm backend: each step is one batch job, one step runtime per node through ``srun``."""
