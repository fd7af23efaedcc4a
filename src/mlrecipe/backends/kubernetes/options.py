"""Options of the Kubernetes backend: the ``kubernetes:`` section of the config file, ``--kubeconfig``,
``--kube-context``, or ``--backend-opt key=value``.

Example::

    kubernetes:
      kubeconfig: ~/.kube/eks-ml.yaml
      context: ml-team@eks-ml
      stuck_timeout: 900
      training_api: v2            # Kubeflow Trainer v2 TrainJob instead of PyTorchJob
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlrecipe.backends.base import BackendOptions


class KubernetesOptions(BackendOptions):
    """Settings of the Kubernetes backend (each step is one Helm release on the cluster)."""

    kubeconfig: str | None = Field(
        None, description="The kubeconfig file (default $KUBECONFIG, else ~/.kube/config; in a pod, the "
        "in-cluster service account); recorded in each step's handle")
    context: str | None = Field(
        None, description="The kubeconfig context, i.e. the cluster and user (default: the current context); "
        "recorded in each step's handle so that uninstall and resume reach the same cluster")
    stuck_timeout: float = Field(
        600.0, ge=0, description="Seconds a step's pods may stay unable to start (image pull, unschedulable) "
        "before the step fails and is uninstalled")
    poll_seconds: float = Field(2.0, gt=0, description="How often the runner reads the workload and its pods")
    training_api: Literal["v1", "v2", "auto"] = Field(
        "auto", description="What the PyTorchJob charts render: v1 (PyTorchJob, Kubeflow training operator), v2 "
        "(TrainJob, Kubeflow Trainer v2) or auto (v2 when the cluster serves trainjobs.trainer.kubeflow.org and not "
        "pytorchjobs.kubeflow.org, else v1; v1 without a cluster, e.g. template). MPIJob and RayJob charts stay on "
        "their operators")
    training_runtime: str = Field(
        "torch-distributed", min_length=1, description="The ClusterTrainingRuntime a TrainJob references "
        "(training_api v2)")
