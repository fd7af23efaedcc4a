"""The Kubernetes backend: each step is one Helm release of its catalog chart.

Public to the rest of mlrecipe (``kfp/``, ``infra/``): the names in ``__all__``; everything else in this package
is the backend's own.
"""

from mlrecipe.backends.kubernetes.options import KubernetesOptions
from mlrecipe.backends.kubernetes.secrets import ENV_PATHS, lift_ray_env_vars, split_values
from mlrecipe.backends.kubernetes.training_api import API_OF_CRD, choose, served_apis

__all__ = ["API_OF_CRD", "ENV_PATHS", "KubernetesOptions", "choose", "lift_ray_env_vars", "served_apis",
           "split_values"]
