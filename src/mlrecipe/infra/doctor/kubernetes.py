"""Checks for the Kubernetes backend, through the official ``kubernetes`` client (read-only GETs):
context reachable, namespace, operator CRDs (and which training API, PyTorchJob v1 or Trainer v2's TrainJob, the
cluster serves and the config's ``training_api`` chose), device plugins, allocatable accelerators on the node
types recipes ask for (or a Karpenter NodePool that can launch them), storage classes, and the
``pv-*`` claims bound."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlrecipe.infra.doctor.base import Check, CheckResult
from mlrecipe.infra.doctor.requirements import (
    DEFAULT_PVCS,
    EFA,
    GPU,
    NEURON_RESOURCES,
    Requirements,
)

DEFAULT_NAMESPACE = "kubeflow-user-example-com"
TIMEOUT = 15
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
PLATFORM_STORAGE_CLASSES = ("ebs-sc", "efs-sc", "fsx-sc")
CONFIGURE_HINT = (
    "write the kubeconfig: aws eks update-kubeconfig --region REGION --name CLUSTER "
    "(terraform output configure_kubectl), or pass --context"
)


@dataclass(frozen=True)
class Operator:
    """An operator the charts target: its CRDs (name -> served version) and how to install it."""

    title: str
    crds: dict[str, str]
    install: str


OPERATOR_INFO = {
    "training": Operator(
        "PyTorchJob CRD (Kubeflow training operator)",
        {"pytorchjobs.kubeflow.org": "v1"},
        "kubectl apply --server-side -k infra/kustomize/training-operator (or terraform apply in infra/terraform)",
    ),
    "trainer": Operator(
        "TrainJob CRD (Kubeflow Trainer v2)",
        {"trainjobs.trainer.kubeflow.org": "v1alpha1", "clustertrainingruntimes.trainer.kubeflow.org": "v1alpha1",
         "jobsets.jobset.x-k8s.io": "v1alpha2"},
        "kubectl apply --server-side -k infra/kustomize/trainer-v2 (or terraform apply -var training_api=v2 in "
        "infra/terraform)",
    ),
    "mpi": Operator(
        "MPIJob v2beta1 CRD (MPI operator)",
        {"mpijobs.kubeflow.org": "v2beta1"},
        "kubectl apply --server-side -f "
        "https://raw.githubusercontent.com/kubeflow/mpi-operator/v0.6.0/deploy/v2beta1/mpi-operator.yaml",
    ),
    "kuberay": Operator(
        "Ray CRDs (KubeRay operator)",
        {"rayjobs.ray.io": "v1", "rayservices.ray.io": "v1", "rayclusters.ray.io": "v1"},
        "helm install kuberay-operator kuberay-operator --repo https://ray-project.github.io/kuberay-helm/ "
        "--version 1.5.2 -n kuberay --create-namespace",
    ),
    "lws": Operator(
        "LeaderWorkerSet CRD",
        {"leaderworkersets.leaderworkerset.x-k8s.io": "v1"},
        "helm install lws oci://registry.k8s.io/lws/charts/lws --version 0.8.0 -n lws-system --create-namespace",
    ),
}
WORKLOAD_OPERATOR = {
    "pytorchjob": "training",
    "mpijob": "mpi",
    "rayjob": "kuberay",
    "rayservice": "kuberay",
    "raycluster": "kuberay",
    "lws": "lws",
}
DEVICE_PLUGINS = {
    GPU: (
        "NVIDIA device plugin",
        ("nvidia-device-plugin",),
        "helm install nvidia-device-plugin nvidia-device-plugin --repo https://nvidia.github.io/k8s-device-plugin "
        "-n kube-system",
    ),
    EFA: (
        "EFA device plugin",
        ("efa-k8s-device-plugin",),
        "helm install aws-efa-k8s-device-plugin aws-efa-k8s-device-plugin --repo https://aws.github.io/eks-charts "
        "-n kube-system",
    ),
    "aws.amazon.com/neuron": (
        "Neuron device plugin",
        ("neuron-device-plugin",),
        "helm install neuron-helm-chart oci://public.ecr.aws/neuron/neuron-helm-chart -n kube-system "
        "--set scheduler.enabled=true",
    ),
}
NVIDIA_FAMILIES = ("g4dn", "g5", "g6", "g6e", "gr6", "p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "p6")
NEURON_FAMILIES = ("trn1", "trn1n", "trn2", "inf1", "inf2")


def _quantity(value: Any) -> int:
    try:
        return int(float(str(value)))
    except (TypeError, ValueError):
        return 0


class Cluster:
    """Lazy, cached read-only view of one cluster through the official client."""

    def __init__(self, context: str | None) -> None:
        self.context = context
        self._api_client: Any = None
        self._cache: dict[str, Any] = {}
        self.unreachable: str | None = None

    def api_client(self) -> Any:
        if self._api_client is None:
            from kubernetes import client, config

            try:
                # KUBECONFIG is read now (the client reads it once, at import time).
                kubeconfig = os.environ.get("KUBECONFIG") or None
                self._api_client = config.new_client_from_config(config_file=kubeconfig, context=self.context)
            except config.ConfigException as exc:
                if self.context is not None:
                    raise
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    raise config.ConfigException(f"{exc}; and not running inside a cluster") from None
                self._api_client = client.ApiClient()
        return self._api_client

    def cached(self, key: str, fetch: Callable[[Any], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = fetch(self.api_client())
        return self._cache[key]

    def version(self) -> Any:
        from kubernetes import client

        return self.cached("version", lambda c: client.VersionApi(c).get_code(_request_timeout=TIMEOUT))

    def crds(self) -> dict[str, Any]:
        from kubernetes import client

        items = self.cached(
            "crds",
            lambda c: client.ApiextensionsV1Api(c).list_custom_resource_definition(_request_timeout=TIMEOUT).items,
        )
        return {crd.metadata.name: crd for crd in items}

    def daemonsets(self) -> list[Any]:
        from kubernetes import client

        return self.cached(
            "daemonsets",
            lambda c: client.AppsV1Api(c).list_daemon_set_for_all_namespaces(_request_timeout=TIMEOUT).items,
        )

    def nodes(self) -> list[Any]:
        from kubernetes import client

        return self.cached("nodes", lambda c: client.CoreV1Api(c).list_node(_request_timeout=TIMEOUT).items)

    def storage_classes(self) -> list[Any]:
        from kubernetes import client

        return self.cached(
            "storageclasses", lambda c: client.StorageV1Api(c).list_storage_class(_request_timeout=TIMEOUT).items
        )

    def namespace(self, name: str) -> Any:
        from kubernetes import client

        return self.cached(f"ns/{name}", lambda c: client.CoreV1Api(c).read_namespace(name, _request_timeout=TIMEOUT))

    def claims(self, namespace: str) -> dict[str, Any]:
        from kubernetes import client

        items = self.cached(
            f"pvc/{namespace}",
            lambda c: (
                client.CoreV1Api(c).list_namespaced_persistent_volume_claim(namespace, _request_timeout=TIMEOUT).items
            ),
        )
        return {pvc.metadata.name: pvc for pvc in items}

    def nodepools(self) -> list[dict[str, Any]]:
        """Karpenter NodePools (plain dicts); [] when Karpenter is not installed."""
        if "nodepools.karpenter.sh" not in self.crds():
            return []
        from kubernetes import client

        listing = self.cached(
            "nodepools",
            lambda c: client.CustomObjectsApi(c).list_cluster_custom_object(
                "karpenter.sh", "v1", "nodepools", _request_timeout=TIMEOUT
            ),
        )
        return list(listing.get("items", []))


def _api_error(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


def _needs_cluster(cluster: Cluster, probe: Callable[[], CheckResult]) -> Callable[[], CheckResult]:
    def run() -> CheckResult:
        if cluster.unreachable is not None:
            return CheckResult.skip("skipped: the cluster is not reachable")
        return probe()

    return run


# ---------------------------------------------------------------- individual probes


def _client_installed() -> CheckResult:
    try:
        import kubernetes
    except ImportError:
        return CheckResult.failed("the kubernetes Python client is not installed", "pip install 'mlrecipe[kubernetes]'")
    return CheckResult.passed(f"kubernetes client {kubernetes.__version__}")


def _reachable(cluster: Cluster) -> CheckResult:
    try:
        from kubernetes.config import ConfigException
    except ImportError:
        cluster.unreachable = "no client"
        return CheckResult.failed("the kubernetes client is missing", "pip install 'mlrecipe[kubernetes]'")
    try:
        info = cluster.version()
    except ConfigException as exc:
        cluster.unreachable = str(exc)
        return CheckResult.failed(f"no usable kubeconfig context: {exc}", CONFIGURE_HINT)
    except Exception as exc:
        cluster.unreachable = str(exc)
        status = getattr(exc, "status", None)
        if status in (401, 403):
            return CheckResult.failed(
                f"the API server refused the credentials ({_api_error(exc)})",
                "refresh AWS credentials (aws sts get-caller-identity) and check the EKS access entry for your role",
            )
        return CheckResult.failed(f"cannot reach the API server: {_api_error(exc)}", CONFIGURE_HINT)
    where = f"context {cluster.context}" if cluster.context else "current context"
    return CheckResult.passed(f"Kubernetes {info.git_version} ({where})")


def _namespace(cluster: Cluster, namespace: str) -> CheckResult:
    try:
        ns = cluster.namespace(namespace)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return CheckResult.failed(
                f"namespace {namespace} does not exist",
                f"kubectl create namespace {namespace} (the ml-platform chart / terraform apply creates it)",
            )
        raise
    phase = ns.status.phase if ns.status else "Unknown"
    if phase != "Active":
        return CheckResult.failed(f"namespace {namespace} is {phase}", f"wait, or recreate namespace {namespace}")
    return CheckResult.passed(f"namespace {namespace} is Active")


def _operator(cluster: Cluster, op: Operator) -> CheckResult:
    crds = cluster.crds()
    found, problems = [], []
    for name, version in op.crds.items():
        crd = crds.get(name)
        if crd is None:
            problems.append(f"{name} missing")
            continue
        served = [v.name for v in crd.spec.versions if v.served]
        if version not in served:
            problems.append(f"{name} serves {', '.join(served)}, not {version}")
        else:
            found.append(f"{name} {version}")
    if not problems:
        return CheckResult.passed(", ".join(found))
    hint = op.install
    if any("mpijobs.kubeflow.org serves" in p for p in problems):
        hint = (
            "mpijobs.kubeflow.org is the training operator's v1 CRD: delete it "
            "(kubectl delete crd mpijobs.kubeflow.org) and install the MPI operator: " + op.install
        )
    return CheckResult.failed("; ".join(problems), hint)


#: The operator each training API needs.
API_OPERATOR = {"v1": "training", "v2": "trainer"}
API_TITLE = {"v1": "v1 (PyTorchJob)", "v2": "v2 (TrainJob)"}


def _chosen_api(cluster: Cluster, option: str) -> tuple[list[str], str]:
    from mlrecipe.backends.kubernetes import API_OF_CRD, choose, served_apis

    served = served_apis(set(cluster.crds()) & set(API_OF_CRD))
    return served, choose(option, served)


def _training_apis(cluster: Cluster, option: str) -> CheckResult:
    """Which training APIs the cluster serves and which one the config's ``training_api`` renders."""
    served, chosen = _chosen_api(cluster, option)
    listing = ", ".join(API_TITLE[a] for a in served) or "neither PyTorchJob nor TrainJob"
    detail = f"the cluster serves {listing}; config training_api: {option} -> {API_TITLE[chosen]}"
    if chosen not in served:
        return CheckResult.failed(detail, OPERATOR_INFO[API_OPERATOR[chosen]].install)
    return CheckResult.passed(detail)


def _training_operator(cluster: Cluster, key: str, option: str) -> CheckResult:
    """The operator of one training API: checked when the config's choice renders it, else not used."""
    _, chosen = _chosen_api(cluster, option)
    if API_OPERATOR[chosen] != key:
        return CheckResult.passed(f"not used: config training_api {option} -> {API_TITLE[chosen]}")
    return _operator(cluster, OPERATOR_INFO[key])


def _device_plugin(cluster: Cluster, resource: str) -> CheckResult:
    title, names, install = DEVICE_PLUGINS[resource]
    matches = [ds for ds in cluster.daemonsets() if any(n in ds.metadata.name for n in names)]
    if not matches:
        return CheckResult.failed(f"no {title} DaemonSet", install)
    parts, unhealthy = [], False
    for ds in matches:
        desired = ds.status.desired_number_scheduled or 0
        ready = ds.status.number_ready or 0
        parts.append(f"{ds.metadata.namespace}/{ds.metadata.name} {ready}/{desired} ready")
        unhealthy = unhealthy or ready < desired
    detail = ", ".join(parts)
    if unhealthy:
        return CheckResult.failed(
            detail, f"kubectl -n {matches[0].metadata.namespace} describe daemonset {matches[0].metadata.name}"
        )
    if all((ds.status.desired_number_scheduled or 0) == 0 for ds in matches):
        detail += " (no matching node yet; Karpenter launches them on demand)"
    return CheckResult.passed(detail)


def _instance_type(node: Any) -> str:
    labels = node.metadata.labels or {}
    return next((labels[k] for k in INSTANCE_TYPE_LABELS if k in labels), "unknown")


def _accelerator_kind(instance_type: str) -> str | None:
    family = instance_type.split(".")[0]
    if family in NEURON_FAMILIES:
        return "neuron"
    if family in NVIDIA_FAMILIES:
        return "nvidia"
    return None


def _requirement(reqs: list[dict[str, Any]], key: str) -> list[str] | None:
    """Values of an ``In`` requirement on ``key`` (None when the pool does not constrain it)."""
    for r in reqs:
        if r.get("key") == key and r.get("operator") == "In":
            return list(r.get("values") or [])
    return None


def _pool_admits(pool: dict[str, Any], instance_type: str | None, resource: str | None) -> bool:
    """Whether a Karpenter NodePool can launch ``instance_type`` offering ``resource`` (without an
    instance type: any node offering it), judged from its instance type / family / category
    requirements."""
    reqs = pool.get("spec", {}).get("template", {}).get("spec", {}).get("requirements", []) or []
    types = _requirement(reqs, INSTANCE_TYPE_LABELS[0])
    families = _requirement(reqs, "karpenter.k8s.aws/instance-family")
    categories = _requirement(reqs, "karpenter.k8s.aws/instance-category")
    want = "neuron" if resource in NEURON_RESOURCES else "nvidia"
    if instance_type is not None:
        family = instance_type.split(".")[0]
        category = re.match(r"[a-z]+", family)
        if types is not None and instance_type not in types:
            return False
        if families is not None and family not in families:
            return False
        if categories is not None and (category is None or category.group(0) not in categories):
            return False
        return resource in (EFA, None) or _accelerator_kind(instance_type) == want
    candidates = list(types or []) + [f"{f}.x" for f in families or []]
    if resource == EFA:
        return bool(types) and any(_accelerator_kind(t) is not None for t in types or [])
    return any(_accelerator_kind(t) == want for t in candidates)


def _allocatable(cluster: Cluster, req: Requirements, resource: str, need: int) -> CheckResult:
    nodes = cluster.nodes()
    if req.node_types:
        nodes = [n for n in nodes if _instance_type(n) in req.node_types]
    fit = [n for n in nodes if _quantity((n.status.allocatable or {}).get(resource)) >= need]
    wanted = f"{need} {resource} per node"
    where = f" on {', '.join(req.node_types)}" if req.node_types else ""
    if len(fit) >= req.nnodes:
        types = sorted({_instance_type(n) for n in fit})
        return CheckResult.passed(f"{len(fit)} node(s) offer {wanted}{where} ({', '.join(types)})")
    node_type = req.node_types[0] if req.node_types else None
    pools = [p["metadata"]["name"] for p in cluster.nodepools() if _pool_admits(p, node_type, resource)]
    if pools:
        return CheckResult.passed(
            f"{len(fit)} node(s) now offer {wanted}{where}; Karpenter NodePool(s) {', '.join(pools)} can launch "
            f"{req.nnodes} on demand"
        )
    return CheckResult.failed(
        f"{len(fit)} node(s) offer {wanted}{where}, the recipe needs {req.nnodes}",
        "add the instance type to a Karpenter NodePool (infra/charts/ml-platform values) or scale a GPU node group "
        "(eksctl scale nodegroup); check the device plugin on those nodes",
    )


def _node_type_available(cluster: Cluster, req: Requirements) -> CheckResult:
    present = sorted({_instance_type(n) for n in cluster.nodes()} & set(req.node_types))
    if present:
        return CheckResult.passed(f"nodes of type {', '.join(present)} exist")
    pools = [p["metadata"]["name"] for p in cluster.nodepools() if _pool_admits(p, req.node_types[0], None)]
    if pools:
        return CheckResult.passed(f"Karpenter NodePool(s) {', '.join(pools)} can launch {req.node_types[0]}")
    return CheckResult.failed(
        f"no node and no Karpenter NodePool for {', '.join(req.node_types)}",
        "add the type to a NodePool or create a node group of that type",
    )


def _accelerator_summary(cluster: Cluster) -> CheckResult:
    nodes = cluster.nodes()
    parts = []
    for resource in (GPU, EFA, *NEURON_RESOURCES[:1]):
        holders = [n for n in nodes if _quantity((n.status.allocatable or {}).get(resource)) > 0]
        total = sum(_quantity(n.status.allocatable[resource]) for n in holders)
        types = ", ".join(sorted({_instance_type(n) for n in holders}))
        parts.append(f"{resource}: {total} on {len(holders)} node(s)" + (f" [{types}]" if types else ""))
    pools = [p["metadata"]["name"] for p in cluster.nodepools()]
    if pools:
        parts.append(f"Karpenter NodePools: {', '.join(pools)}")
    return CheckResult.passed(f"{len(nodes)} node(s); " + "; ".join(parts))


def _storage_classes(cluster: Cluster, need_default: bool) -> CheckResult:
    classes = cluster.storage_classes()
    names = {sc.metadata.name: sc.provisioner for sc in classes}
    default = [
        sc.metadata.name
        for sc in classes
        if (sc.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
    ]
    listing = ", ".join(f"{n} ({p})" for n, p in sorted(names.items())) or "none"
    missing = [n for n in PLATFORM_STORAGE_CLASSES if n not in names]
    if need_default and not default:
        return CheckResult.failed(
            f"no default StorageClass for the recipe's ebs volume; classes: {listing}",
            "kubectl annotate storageclass ebs-sc storageclass.kubernetes.io/is-default-class=true",
        )
    if missing:
        return CheckResult.failed(
            f"missing {', '.join(missing)}; classes: {listing}",
            "install infra/charts/ml-platform (terraform apply does) to create the platform storage classes",
        )
    return CheckResult.passed(f"{listing}; default: {', '.join(default) or 'none'}")


def _claim(cluster: Cluster, namespace: str, name: str, mount_path: str) -> CheckResult:
    pvc = cluster.claims(namespace).get(name)
    mount = f" (mounted at {mount_path})" if mount_path else ""
    if pvc is None:
        return CheckResult.failed(
            f"claim {namespace}/{name}{mount} does not exist",
            "install infra/charts/ml-platform with the EFS / FSx ids (terraform apply does), "
            "or create the PersistentVolume and claim",
        )
    phase = pvc.status.phase if pvc.status else "Unknown"
    if phase != "Bound":
        return CheckResult.failed(
            f"claim {namespace}/{name} is {phase}",
            f"kubectl -n {namespace} describe pvc {name}; check its PersistentVolume and the CSI driver pods",
        )
    capacity = (pvc.status.capacity or {}).get("storage", "?")
    return CheckResult.passed(
        f"{name} Bound to {pvc.spec.volume_name} ({pvc.spec.storage_class_name or 'no class'}, {capacity}){mount}"
    )


# ---------------------------------------------------------------- the list


def checks(req: Requirements, context: str | None = None, namespace: str = DEFAULT_NAMESPACE,
           training_api: str = "auto") -> list[Check]:
    """The Kubernetes backend's checks for ``req`` against ``context`` / ``namespace``; ``training_api`` is the
    config's option (v1, v2, auto), which decides whether a PyTorchJob recipe needs the training operator or
    Trainer v2."""
    cluster = Cluster(context)
    gate = lambda probe: _needs_cluster(cluster, probe)  # noqa: E731
    out = [
        Check("kubernetes client", True, _client_installed),
        Check("context reachable", True, lambda: _reachable(cluster)),
        Check(f"namespace {namespace}", True, gate(lambda: _namespace(cluster, namespace))),
    ]
    needed_ops = {WORKLOAD_OPERATOR[w] for w in req.operators} if req.from_recipe else set(OPERATOR_INFO)
    if "training" in needed_ops:
        needed_ops.add("trainer")
        out.append(Check("training APIs", True, gate(lambda: _training_apis(cluster, training_api))))
    for key, op in OPERATOR_INFO.items():
        if key in API_OPERATOR.values():
            probe = lambda key=key: _training_operator(cluster, key, training_api)  # noqa: E731
        else:
            probe = lambda op=op: _operator(cluster, op)  # noqa: E731
        out.append(Check(op.title, key in needed_ops, gate(probe)))

    neuron_needed = any(req.resources.get(r, 0) for r in NEURON_RESOURCES)
    for resource, (title, _, _) in DEVICE_PLUGINS.items():
        needed = neuron_needed if resource in NEURON_RESOURCES else req.resources.get(resource, 0) > 0
        out.append(Check(title, needed, gate(lambda r=resource: _device_plugin(cluster, r))))

    accelerators = {k: v for k, v in req.resources.items() if k in (GPU, EFA, *NEURON_RESOURCES)}
    for resource, need in accelerators.items():
        out.append(
            Check(f"allocatable {resource}", True, gate(lambda r=resource, n=need: _allocatable(cluster, req, r, n)))
        )
    if req.node_types and not accelerators:
        out.append(
            Check(f"node type {', '.join(req.node_types)}", True, gate(lambda: _node_type_available(cluster, req)))
        )
    if not req.from_recipe:
        out.append(Check("accelerators", False, gate(lambda: _accelerator_summary(cluster))))

    out.append(Check("storage classes", req.ebs, gate(lambda: _storage_classes(cluster, req.ebs))))
    claims = req.pvcs if req.from_recipe else list(DEFAULT_PVCS)
    for name, path in claims:
        out.append(Check(f"claim {name} bound", True, gate(lambda n=name, p=path: _claim(cluster, namespace, n, p))))
    return out
