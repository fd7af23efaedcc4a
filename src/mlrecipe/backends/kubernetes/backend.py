"""The Kubernetes backend: each step is one Helm release ``<release>-<step>`` of its rendered chart.

``plan()`` renders the step's chart with Helm's own engine; ``submit()`` creates the step's credential
Secrets (outside the Helm release) and installs exactly those manifests; ``poll()`` reads the workload's
own status and the pods' reasons; logs of rank N are copied to ``<step dir>/rank-N.log``. Options:
:mod:`mlrecipe.backends.kubernetes.options`; every call goes through one :class:`KubeClient` per cluster.
"""

from __future__ import annotations

from mlrecipe.backends.base import Backend, CollectsDebugRecords, DebugRecord, ReleaseContext
from mlrecipe.backends.kubernetes import debug, status, training_api
from mlrecipe.backends.kubernetes.cluster import KubeClient
from mlrecipe.backends.kubernetes.handle import KubernetesHandle
from mlrecipe.backends.kubernetes.options import KubernetesOptions
from mlrecipe.backends.kubernetes.plan import KubernetesPlan, render_step
from mlrecipe.backends.kubernetes.running import KubernetesRunningStep
from mlrecipe.errors import ClusterError, TransientBackendError
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec


class KubernetesBackend(CollectsDebugRecords, Backend[KubernetesPlan, KubernetesHandle, KubernetesOptions]):
    """Runs steps as Helm releases on a Kubernetes cluster; see the module docstring."""

    name = "kubernetes"
    kinds = frozenset(StepKind) - {StepKind.ENDPOINT}  # a SageMaker endpoint has no Kubernetes workload
    options_type = KubernetesOptions
    handle_type = KubernetesHandle
    log_file_name = "rank-{rank}.log"  #: the pod log of rank N, copied by the step's poll

    def __init__(self, options: KubernetesOptions) -> None:
        super().__init__(options)
        self._clients: dict[tuple[str | None, str | None], KubeClient] = {}
        self._injected: KubeClient | None = None
        self._training_api: str | None = None

    def client(self, kubeconfig: str | None = None, context: str | None = None) -> KubeClient:
        """The client of a cluster (default: the one the options name), created once."""
        if self._injected is not None:
            return self._injected
        key = (kubeconfig, context) if kubeconfig or context else (self.options.kubeconfig, self.options.context)
        if key not in self._clients:
            self._clients[key] = KubeClient(*key)
        return self._clients[key]

    def use_client(self, client: KubeClient) -> None:
        """Talk to every cluster through ``client`` (tests inject a recorded cluster this way)."""
        self._injected = client

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> KubernetesPlan:
        plan = render_step(step, ctx, env or {}, (self.training_api(), self.options.training_runtime))
        if self.options.training_api == "auto" and plan.workload_kind() == "TrainJob":
            plan.notes.append("training_api auto: the cluster serves TrainJob (Kubeflow Trainer v2) and not "
                              "PyTorchJob, so this step is a TrainJob")
        return plan

    def training_api(self) -> str:
        """The training API the PyTorchJob charts render (:mod:`.training_api`); ``auto`` asks the cluster once,
        and is v1 when no cluster is configured or reachable."""
        if self._training_api is None:
            served = None
            if self.options.training_api == "auto":
                try:
                    crds = self.client().served_crds(training_api.CRD_VERSION)
                    served = training_api.served_apis(crds)
                except (ClusterError, TransientBackendError):
                    served = None
            self._training_api = training_api.choose(self.options.training_api, served)
        return self._training_api

    def submit(self, plan: KubernetesPlan, ctx: ReleaseContext) -> KubernetesRunningStep:
        workload = plan.workload() or {}
        labels = (workload.get("metadata") or {}).get("labels") or {}
        selector = f"app.kubernetes.io/instance={plan.release}"
        if labels.get("mlrecipe.io/step"):
            selector += f",mlrecipe.io/step={labels['mlrecipe.io/step']}"
        if workload.get("kind") == "TrainJob":  # its JobSet's pods, named after it
            selector = f"jobset.sigs.k8s.io/jobset-name={workload['metadata']['name']}"
        client = self.client()
        kubeconfig, context = client.resolve_cluster()
        handle = KubernetesHandle(
            helm_release=plan.helm_release,
            namespace=plan.namespace,
            release=plan.release,
            kind=workload.get("kind"),
            name=(workload.get("metadata") or {}).get("name"),
            selector=selector,
            url=plan.service_url(),
            secrets=[s["metadata"]["name"] for s in plan.secrets],
            metrics_file=plan.metrics_file,
            kubeconfig=kubeconfig,
            context=context,
        )
        for secret in plan.secrets:
            client.apply_secret(secret)
        client.install(plan)
        return KubernetesRunningStep(handle, client, ctx.step_dir(plan.step), self.options.stuck_timeout,
                                     self.options.poll_seconds)

    def cancel_handle(self, handle: KubernetesHandle) -> None:
        client = self.client(handle.kubeconfig, handle.context)
        client.uninstall(handle.helm_release, handle.namespace)
        for name in handle.secrets:
            client.delete_secret(name, handle.namespace)

    def handle_alive(self, handle: KubernetesHandle) -> bool:
        if not handle.kind or not handle.name:
            return False
        obj = self.client(handle.kubeconfig, handle.context).get_object(handle.kind, handle.name, handle.namespace)
        return obj is not None and status.workload_outcome(obj) is None

    def debug_records(self, handle: KubernetesHandle) -> list[DebugRecord]:
        """The workload object, pods, pod logs and events the cluster still holds (:mod:`.debug`)."""
        return debug.debug_records(self.client(handle.kubeconfig, handle.context), handle)
