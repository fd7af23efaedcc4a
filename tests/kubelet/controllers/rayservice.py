"""ray.io/v1 RayService as KubeRay v1.5.2 runs it (github.com/ray-project/kuberay, tag v1.5.2:
ray-operator/controllers/ray/rayservice_controller.go, common/service.go, utils/util.go):

- a RayCluster ``<rayservice>-<5>`` (GenerateRayClusterName) from ``rayClusterConfig`` (:mod:`.raycluster`, with the
  RayService env: ``RAY_TIMEOUT_MS_TASK_WAIT_FOR_DEATH_INFO``, ``RAY_GCS_SERVER_REQUEST_TIMEOUT_SECONDS``,
  ``RAY_SERVE_KV_TIMEOUT_S``), the RayService's own head Service ``<rayservice>-head-svc`` and the serve Service
  ``<rayservice>-serve-svc`` (the ``serve`` port, default 8000: GenerateServeServiceName, BuildServeService);
- reconcileServe: once the head pod is running and ready (isHeadPodRunningAndReady; workers are not waited for), the
  dashboard URL from the head Service's port named ``dashboard`` (FetchHeadServiceURL: without one the Serve
  applications are never submitted), ``serveConfigV2`` (YAML) sent as JSON with ``PUT /api/serve/applications/``
  (updateServeDeployment), then the applications' status from ``GET /api/serve/applications/?api_type=declarative``
  (getAndCheckServeStatus): ready when every application is RUNNING;
- here the workload is Ready when, beyond that, the serve Service answers the proxy's ``/-/healthz`` (KubeRay's
  head-pod serve label check, updateHeadPodServeLabel), and it keeps running until the harness's run ends.

Simpler here: an application that reaches DEPLOY_FAILED fails the run at once, naming the head pod (KubeRay keeps
the RayService not ready and retries); no zero-downtime upgrade, incremental upgrade, ``serviceUnhealthySecond
Threshold``/``deploymentUnhealthySecondThreshold`` (said in a note); the serve Service resolves to the head pod only.
At Ready a note names the pod each Serve replica runs on (the status's replicas' ``node_ip``).
"""

from __future__ import annotations

import copy
import http.client
import json
import time
from typing import Any

import yaml

from tests.kubelet.controllers import Controller, suffix
from tests.kubelet.controllers.raycluster import RayClusterPods
from tests.kubelet.report import Outcome

SERVE_PORT = 8000


def _request(method: str, host: str, port: int, path: str, body: bytes | None = None) -> tuple[int, bytes] | None:
    try:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, data
    except (OSError, http.client.HTTPException):
        return None


class RayServiceController(Controller):
    kind = "RayService"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        self.spec = copy.deepcopy(obj.get("spec") or {})
        self.ray: RayClusterPods | None = None
        self.submitted = False
        self.apps: dict[str, Any] = {}
        self.next_check = 0.0

    def start(self) -> None:
        for key in ("serviceUnhealthySecondThreshold", "deploymentUnhealthySecondThreshold", "upgradeStrategy"):
            if self.spec.get(key):
                self.cluster.note(f"RayService {self.name}: spec.{key} not followed by the harness")
        labels = {"ray.io/originated-from-cr-name": self.name, "ray.io/originated-from-crd": "RayService"}
        self.ray = RayClusterPods(self.spec["rayClusterConfig"], f"{self.name}-{suffix()}", self.namespace,
                                  self.cluster, "RayService", labels)
        self.cluster.store.add(self.ray.head_service_object(f"{self.name}-head-svc"))
        serve_port = self.ray.service_ports().get("serve", SERVE_PORT)
        self.cluster.store.add({"apiVersion": "v1", "kind": "Service",
                                "metadata": {"name": f"{self.name}-serve-svc", "namespace": self.namespace},
                                "spec": {"ports": [{"name": "serve", "port": serve_port, "targetPort": serve_port}],
                                         "selector": {"ray.io/cluster": self.ray.name, "ray.io/node-type": "head"}}})
        self.ray.start()
        self.pods = self.ray.pods

    def _dashboard(self) -> tuple[str, int]:
        assert self.ray is not None and self.ray.head is not None
        return self.ray.head.ip, int(self.ray.dashboard_url().rsplit(":", 1)[1])

    def _head_failed(self, summary: str) -> Outcome:
        assert self.ray is not None and self.ray.head is not None
        head = self.ray.head
        container = next(reversed(head.containers), None)
        return Outcome(False, self.workload, summary, head.name, container,
                       head.log_tail(container) if container else "")

    def poll(self) -> Outcome | None:
        assert self.ray is not None
        pod = self.ray.failed_pod()
        if pod is not None:
            return self.failed(pod, "a Ray pod of the RayCluster exited (ray start --block ends only on failure)")
        head = self.ray.head
        if head is None or not head.running.is_set() or time.monotonic() < self.next_check:
            return None
        self.next_check = time.monotonic() + 2.0
        self.ray.is_ready()
        if head.name not in self.ray.ready:
            return None
        try:
            host, port = self._dashboard()
        except LookupError as exc:
            return self._head_failed(f"{exc} (the Serve applications are never submitted)")
        if not self.submitted:
            config = yaml.safe_load(str(self.spec.get("serveConfigV2") or "")) or {}
            answer = _request("PUT", host, port, "/api/serve/applications/", json.dumps(config).encode())
            if answer is None or answer[0] != 200:
                return None  # KubeRay retries: the dashboard may not accept requests yet
            self.submitted = True
        answer = _request("GET", host, port, "/api/serve/applications/?api_type=declarative")
        if answer is None or answer[0] != 200:
            return None
        self.apps = json.loads(answer[1]).get("applications") or {}
        failed = {n: a for n, a in self.apps.items() if a.get("status") in ("DEPLOY_FAILED", "UNHEALTHY")}
        if failed:
            name, app = next(iter(failed.items()))
            message = str(app.get("message") or "").strip().splitlines()
            return self._head_failed(f"Serve application {name} {app.get('status')}"
                                     + (f": {message[-1]}" if message else ""))
        if not self.apps or any(a.get("status") != "RUNNING" for a in self.apps.values()):
            return None
        serve_port = self.ray.service_ports().get("serve", SERVE_PORT)
        health = _request("GET", head.ip, serve_port, "/-/healthz")
        if health is None or health[0] != 200:
            return None
        names = ", ".join(sorted(self.apps))
        self.cluster.note(f"RayService {self.name}: Serve replicas (dashboard's /api/serve/applications/): "
                          + "; ".join(self.placements()))
        return Outcome(True, self.workload, f"ready (Serve applications RUNNING: {names}; {self.name}-serve-svc "
                                            "answers)")

    def placements(self) -> list[str]:
        """``<application>/<deployment> on <pod>`` for each replica the Serve status lists (its node's IP is a pod's
        127.0.0.N here)."""
        assert self.ray is not None
        pods = {p.ip: p.name for p in self.ray.pods}
        return [f"{app}/{deployment} on {pods.get(str(replica.get('node_ip')), replica.get('node_ip'))}"
                for app, details in sorted(self.apps.items())
                for deployment, found in sorted((details.get("deployments") or {}).items())
                for replica in found.get("replicas") or []]

    def timed_out(self, timeout: float) -> Outcome:
        if self.ray is None or self.ray.head is None:
            return super().timed_out(timeout)
        statuses = ", ".join(f"{n} {a.get('status')}" for n, a in self.apps.items()) or "none reported"
        return self._head_failed(f"not ready within --timeout {timeout:.0f} s (Serve applications: {statuses})")

    def stop(self) -> None:
        if self.ray is not None:
            self.ray.stop()
