"""mlrecipe: run ML pipelines from YAML recipes locally, on Slurm, on Kubernetes and on SageMaker."""

__version__ = "0.1.0"
