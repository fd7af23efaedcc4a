"""mlrecipe: run ML pipelines from YAML recipes locally, on Slurm and on Kubernetes."""

__version__ = "0.1.0"
