"""The one way mlrecipe talks to a cluster: :class:`KubeClient` (the official ``kubernetes`` client and Helm's
SDK, ``helm_python``, both imported when first used).

A client is bound to one cluster (kubeconfig file and context) and loads its configuration once. Errors
become :class:`~mlrecipe.errors.ClusterError` (refused: 4xx, no configuration) or
:class:`~mlrecipe.errors.TransientBackendError` (unreachable, 5xx, 429: ask again).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mlrecipe.backends.kubernetes.plan import KubernetesPlan
from mlrecipe.errors import ClusterError, TransientBackendError

INSTALL_HINT = "the kubernetes backend needs the 'kubernetes' client: pip install 'mlrecipe[kubernetes]'"

#: kind -> (group, version, plural) of the custom resources the charts render.
CUSTOM = {
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "RayJob": ("ray.io", "v1", "rayjobs"),
    "RayService": ("ray.io", "v1", "rayservices"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
}


class KubeClient:
    """A cluster: ``kubeconfig`` (default ``$KUBECONFIG`` / ``~/.kube/config``, else in-cluster) and ``context``."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self._api: Any = None

    @property
    def api(self) -> Any:
        """The ``kubernetes.client`` module's ApiClient for this cluster (configuration loaded once)."""
        if self._api is None:
            try:
                from kubernetes import client, config
            except ImportError as exc:
                raise ClusterError(INSTALL_HINT) from exc
            configuration = client.Configuration()
            try:
                config.load_kube_config(config_file=self.kubeconfig, context=self.context,
                                        client_configuration=configuration)
            except Exception as exc:
                if self.kubeconfig or self.context:
                    raise ClusterError(f"cannot load kubeconfig {self.kubeconfig or '(default)'} context "
                                       f"{self.context or '(current)'}: {exc}") from exc
                try:
                    config.load_incluster_config(client_configuration=configuration)
                except Exception as exc2:
                    raise ClusterError(f"no Kubernetes configuration found (kubeconfig or in-cluster): {exc}") \
                        from exc2
            self._api = client.ApiClient(configuration)
        return self._api

    def resolve_cluster(self) -> tuple[str | None, str | None]:
        """Load the configuration and name the cluster: (kubeconfig, context), the current context resolved."""
        _ = self.api
        if self.context is None:
            try:
                from kubernetes import config

                _, active = config.list_kube_config_contexts(config_file=self.kubeconfig)
                self.context = (active or {}).get("name")
            except Exception:  # in-cluster configuration: no context to name
                self.context = None
        return self.kubeconfig, self.context

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client import ApiException

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status in (429, 500, 502, 503, 504):
                raise TransientBackendError(f"{what}: API server answered {exc.status} {exc.reason}") from exc
            raise ClusterError(f"{what}: {exc.status} {exc.reason}", exc.status) from exc
        except (OSError, ConnectionError) as exc:
            raise TransientBackendError(f"{what}: cannot reach the API server: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("urllib3"):
                raise TransientBackendError(f"{what}: cannot reach the API server: {exc}") from exc
            raise

    def _helm(self, namespace: str) -> Any:
        from helm_python import Config

        return Config(kubeconfig_path=self.kubeconfig, kube_context=self.context, namespace=namespace)

    def install(self, plan: KubernetesPlan) -> dict[str, Any]:
        """Install the plan's manifests as Helm release ``plan.helm_release``; return Helm's summary."""
        from mlrecipe.backends.kubernetes.static_chart import write_static_chart

        try:
            with tempfile.TemporaryDirectory(prefix="mlrecipe-chart-") as tmp, self._helm(plan.namespace) as cfg:
                chart = write_static_chart(plan, Path(tmp))
                return cfg.install(str(chart), plan.helm_release, {}, namespace=plan.namespace,
                                   create_namespace=True)
        except Exception as exc:
            raise ClusterError(f"helm install {plan.helm_release} in {plan.namespace} failed: "
                               f"{getattr(exc, 'detail', exc)}") from exc

    def uninstall(self, helm_release: str, namespace: str) -> None:
        """Remove the step's Helm release (and with it every object); idempotent."""
        try:
            with self._helm(namespace) as cfg:
                cfg.uninstall(helm_release, ignore_not_found=True)
        except Exception as exc:
            raise ClusterError(f"helm uninstall {helm_release} in {namespace} failed: "
                               f"{getattr(exc, 'detail', exc)}") from exc

    def apply_secret(self, manifest: dict[str, Any]) -> None:
        """Create or replace a Secret (kept out of the Helm release, so its value is not in release history)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        meta = manifest["metadata"]
        what = f"creating Secret {meta['name']} in {meta['namespace']}"
        try:
            self._call(what, core.create_namespaced_secret, meta["namespace"], manifest)
        except ClusterError as exc:
            if exc.status != 409:
                raise
            self._call(what, core.replace_namespaced_secret, meta["name"], meta["namespace"], manifest)

    def delete_secret(self, name: str, namespace: str) -> None:
        """Delete a Secret; a missing one is fine."""
        from kubernetes import client

        try:
            self._call(f"deleting Secret {name}", client.CoreV1Api(self.api).delete_namespaced_secret, name,
                       namespace)
        except ClusterError as exc:
            if exc.status != 404:
                raise

    def served_crds(self, crds: dict[str, str]) -> set[str]:
        """Which of ``crds`` (CRD name ``<plural>.<group>`` -> version) the cluster serves, from API discovery
        (``GET /apis/<group>/<version>``, which every authenticated user may read, unlike the CRDs themselves)."""
        from kubernetes import client

        api = client.CustomObjectsApi(self.api)
        found = set()
        for name, version in crds.items():
            plural, group = name.split(".", 1)
            try:
                listing = self._call(f"discovering {group}/{version}", api.get_api_resources, group, version,
                                     _request_timeout=(3, 10))
            except ClusterError as exc:
                if exc.status != 404:
                    raise
                continue
            if any(r.name == plural for r in listing.resources or []):
                found.add(name)
        return found

    def get_object(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The object as the API returns it (a dict), or ``None`` when it does not exist."""
        from kubernetes import client

        what = f"reading {kind}/{name}"
        try:
            if kind in CUSTOM:
                group, version, plural = CUSTOM[kind]
                return self._call(what, client.CustomObjectsApi(self.api).get_namespaced_custom_object, group,
                                  version, namespace, plural, name)
            if kind == "Job":
                obj = self._call(what, client.BatchV1Api(self.api).read_namespaced_job, name, namespace)
            elif kind == "Deployment":
                obj = self._call(what, client.AppsV1Api(self.api).read_namespaced_deployment, name, namespace)
            else:
                return None
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise
        return {"kind": kind, **self.api.sanitize_for_serialization(obj)}

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods matching a label selector, as dicts."""
        from kubernetes import client

        pods = self._call(f"listing pods {selector}", client.CoreV1Api(self.api).list_namespaced_pod, namespace,
                          label_selector=selector)
        return self.api.sanitize_for_serialization(pods).get("items", [])

    def list_events(self, namespace: str, involved: str) -> list[dict[str, Any]]:
        """The events of the object named ``involved`` in ``namespace`` (core/v1 Events), as dicts."""
        from kubernetes import client

        events = self._call(f"listing the events of {involved}", client.CoreV1Api(self.api).list_namespaced_event,
                            namespace, field_selector=f"involvedObject.name={involved}")
        return self.api.sanitize_for_serialization(events).get("items", [])

    def pod_file_tail(self, name: str, namespace: str, path: str, max_bytes: int = 64 * 1024) -> str:
        """The last ``max_bytes`` of a file in a pod's first container (``tail -c``); "" when it cannot be read
        (no such file yet, the pod is not running, exec is not allowed)."""
        from kubernetes import client
        from kubernetes.stream import stream

        api = client.CoreV1Api(self.api)
        try:
            out = self._call(f"reading {path} in pod {name}", stream, api.connect_get_namespaced_pod_exec, name,
                             namespace, command=["tail", "-c", str(max_bytes), path], stderr=False, stdin=False,
                             stdout=True, tty=False)
        except ClusterError:
            return ""
        return out if isinstance(out, str) else ""

    def pod_log(self, name: str, namespace: str) -> str:
        """The whole current log of a pod's first container ("" when not available yet)."""
        from kubernetes import client

        try:
            return str(self._call(f"reading the log of pod {name}",
                                  client.CoreV1Api(self.api).read_namespaced_pod_log, name, namespace))
        except ClusterError:
            return ""
