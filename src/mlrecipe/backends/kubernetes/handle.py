"""The handle of a Kubernetes step: its Helm release, its workload object, and the cluster it went to."""

from __future__ import annotations

from pydantic import Field

from mlrecipe.backends.base import StepHandle


class KubernetesHandle(StepHandle):
    """``kubeconfig`` and ``context`` name the cluster the step was installed on (``None``: the defaults)."""

    helm_release: str
    namespace: str
    release: str
    kind: str | None = Field(None, description="The workload's kind (PyTorchJob, MPIJob, Job, Deployment ...)")
    name: str | None = Field(None, description="The workload's name")
    selector: str = Field("", description="Label selector of the step's pods")
    url: str | None = Field(None, description="In-cluster URL of a serving step's Service")
    secrets: list[str] = Field(default_factory=list, description="Secrets created for the step's credentials")
    metrics_file: str | None = Field(None, description="MLRECIPE_METRICS_FILE in the pods, on a shared volume")
    kubeconfig: str | None = None
    context: str | None = None
