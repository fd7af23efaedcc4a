"""Talk to the cluster: the official ``kubernetes`` client and Helm's SDK (helm_python), both lazy."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mlrecipe.backends.kubernetes.plan import KubernetesPlan

INSTALL_HINT = "the kubernetes backend needs the 'kubernetes' client: pip install 'kubernetes>=29'"

#: kind -> (group, version, plural) of the custom resources the charts render.
CUSTOM = {
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "RayJob": ("ray.io", "v1", "rayjobs"),
    "RayService": ("ray.io", "v1", "rayservices"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
}


class ClusterError(RuntimeError):
    """The cluster could not be reached or refused an action."""


def _client(options: dict[str, Any]) -> Any:
    """The ``kubernetes.client`` module with a loaded configuration (kubeconfig, else in-cluster)."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise ClusterError(INSTALL_HINT) from exc
    try:
        config.load_kube_config(config_file=options.get("kubeconfig"), context=options.get("kube_context"))
    except Exception:
        try:
            config.load_incluster_config()
        except Exception as exc:
            raise ClusterError(f"no Kubernetes configuration found (kubeconfig or in-cluster): {exc}") from exc
    return client


def _helm(namespace: str, options: dict[str, Any]) -> Any:
    from helm_python import Config

    return Config(
        kubeconfig_path=options.get("kubeconfig"), kube_context=options.get("kube_context"), namespace=namespace
    )


def install(plan: KubernetesPlan, options: dict[str, Any]) -> dict[str, Any]:
    """Install the plan's manifests as Helm release ``plan.helm_release``; return Helm's summary."""
    from mlrecipe.backends.kubernetes.static_chart import write_static_chart

    with tempfile.TemporaryDirectory(prefix="mlrecipe-chart-") as tmp, _helm(plan.namespace, options) as cfg:
        chart = write_static_chart(plan, Path(tmp))
        return cfg.install(str(chart), plan.helm_release, {}, namespace=plan.namespace, create_namespace=True)


def uninstall(helm_release: str, namespace: str, options: dict[str, Any]) -> None:
    """Remove the step's Helm release (and with it every object); idempotent."""
    with _helm(namespace, options) as cfg:
        cfg.uninstall(helm_release, ignore_not_found=True)


def get_object(kind: str, name: str, namespace: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """The object as the API returns it (a dict), or ``None`` when it does not exist."""
    client = _client(options)
    try:
        if kind in CUSTOM:
            group, version, plural = CUSTOM[kind]
            return client.CustomObjectsApi().get_namespaced_custom_object(group, version, namespace, plural, name)
        api = client.ApiClient()
        if kind == "Job":
            obj = client.BatchV1Api().read_namespaced_job(name, namespace)
        elif kind == "Deployment":
            obj = client.AppsV1Api().read_namespaced_deployment(name, namespace)
        else:
            return None
        return {"kind": kind, **api.sanitize_for_serialization(obj)}
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise ClusterError(f"reading {kind}/{name}: {exc.reason}") from exc


def list_pods(namespace: str, selector: str, options: dict[str, Any]) -> list[dict[str, Any]]:
    """Pods matching a label selector, as dicts."""
    client = _client(options)
    pods = client.CoreV1Api().list_namespaced_pod(namespace, label_selector=selector)
    return client.ApiClient().sanitize_for_serialization(pods).get("items", [])


def pod_log(name: str, namespace: str, options: dict[str, Any]) -> str:
    """The whole current log of a pod's first container ("" when not available yet)."""
    client = _client(options)
    try:
        return str(client.CoreV1Api().read_namespaced_pod_log(name, namespace))
    except client.ApiException:
        return ""
