"""The Kubernetes backend: each step is one Helm release of its catalog chart.

Public to the rest of mlrecipe (``kfp/``, ``infra/``): the names in ``__all__``; everything else in this package
is the backend's own.
"""

from mlrecipe.backends.kubernetes.secrets import ENV_PATHS, lift_ray_env_vars, split_values

__all__ = ["ENV_PATHS", "lift_ray_env_vars", "split_values"]
