"""ray.io/v1 RayCluster pods as KubeRay v1.5.2 builds them (github.com/ray-project/kuberay, tag v1.5.2;
``KUBERAY_VERSION = "v1.5.2"`` in ray-operator/controllers/ray/utils/constant.go), shared by the RayJob and RayService
controllers and a bare RayCluster:

- names (utils/util.go PodName, GenerateHeadServiceName, GenerateFQDNServiceName): head pod ``<cluster>-head-<5>``,
  worker pods ``<cluster>-<group>-worker-<5>``, the head Service ``<cluster>-head-svc`` whose FQDN
  ``<cluster>-head-svc.<ns>.svc.cluster.local`` is ``FQ_RAY_IP``; labels ``ray.io/cluster``, ``ray.io/node-type``,
  ``ray.io/group`` (``headgroup`` for the head), ``ray.io/identifier``, ``ray.io/is-ray-node`` (common/pod.go
  labelPod); the Service's ports are the head container's named ports, else client 10001, gcs-server 6379,
  dashboard 8265, metrics 8080, serve 8000, with metrics 8080 added when missing (common/service.go getServicePorts);
- the Ray container (the first) gets ``/bin/bash -c -- "[<its command and args> && ]ulimit -n 65536; ray start
  [--head] <flags>"`` unless its command already contains ``ray start`` (common/pod.go BuildPod); the flags are the
  group's ``rayStartParams`` plus what setMissingRayStartParams and generateRayStartCommand add: a worker's
  ``address=<FQ_RAY_IP>:<port>`` (``port`` of the head's params, else 6379), the head's ``dashboard-host=0.0.0.0``,
  ``metrics-export-port=8080``, ``block``, ``dashboard-agent-listen-port=52365``, ``num-cpus`` from the CPU limit
  (else request), ``memory`` from the memory limit; sorted, ``--key=value`` or ``--key`` for "true"
  (convertParamMap); a ``/dev/shm`` emptyDir (Memory) when the container has none (addEmptyDir);
- env appended to the Ray container (setContainerEnvVars): a worker's ``FQ_RAY_IP`` and ``RAY_IP`` (the Service's
  short name), ``RAY_CLUSTER_NAME`` (fieldRef to the ``ray.io/cluster`` label), ``RAY_CLOUD_INSTANCE_ID``,
  ``RAY_NODE_TYPE_NAME``, ``KUBERAY_GEN_RAY_START_CMD``, ``RAY_PORT``, for a RayService's pods
  ``RAY_TIMEOUT_MS_TASK_WAIT_FOR_DEATH_INFO=0``, ``RAY_GCS_SERVER_REQUEST_TIMEOUT_SECONDS=5``,
  ``RAY_SERVE_KV_TIMEOUT_S=5``, ``RAY_ADDRESS`` (head ``127.0.0.1:<port>``, worker ``<FQ_RAY_IP>:<port>``),
  ``RAY_USAGE_STATS_KUBERAY_IN_USE=1``, the head's ``RAY_USAGE_STATS_EXTRA_TAGS``,
  ``RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE=1``; init containers get ``FQ_RAY_IP``/``RAY_IP`` (setInitContainerEnvVars);
- every worker first runs the init container ``wait-gcs-ready`` (DefaultWorkerPodTemplate: ``ray health-check
  --address <FQ_RAY_IP>:<port>`` every 5 s, with the Ray container's image, env and volume mounts);
- the cluster is Ready (raycluster_controller.go calculateStatus) when every pod runs and is ready by the probes
  KubeRay injects (initLivenessAndReadinessProbe: the head's dashboard agent ``/api/local_raylet_healthz`` and
  dashboard ``/api/gcs_healthz`` answer "success", a worker's agent likewise).

Knowingly simpler here (each said in a note): every pod shares this machine's network, so the harness adds
``node-ip-address=<the pod's 127.0.0.N>`` to every group's params (a pod's Ray finds its address from its own
interface) and gives worker pods free ports for ``dashboard-agent-listen-port`` and ``metrics-export-port`` (the
agent also binds 127.0.0.1, which pods would share); ``num-cpus`` is cut to 1 and ``object-store-memory`` set to
75 MiB (two cores and little memory here); GPU limits (which the harness drops) are not turned into ``num-gpus``
but for a RayService's pods, whose ``num-gpus`` is the container's ``*gpu`` limits as KubeRay sets it
(generateRayStartCommand), so that Serve places GPU replicas where the cluster would (a RayJob's GPU workers would
run CUDA code on a CPU here);
the readiness probes are HTTP GETs to the pod's address instead of ``wget`` to localhost in the pod; no
autoscaler, GCS fault tolerance, auth token, TLS, ``numOfHosts`` > 1 or suspend.
"""

from __future__ import annotations

import copy
import http.client
import shlex
from typing import Any

from tests.kubelet.controllers import Controller, suffix
from tests.kubelet.network import CLUSTER_DOMAIN
from tests.kubelet.pods import DEVICE_RESOURCES, Pod
from tests.kubelet.report import Outcome

KUBERAY_VERSION = "v1.5.2"
DEFAULT_GCS_PORT = 6379
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_METRICS_PORT = 8080
DEFAULT_AGENT_PORT = 52365
DEFAULT_PORTS = {"client": 10001, "gcs-server": DEFAULT_GCS_PORT, "dashboard": DEFAULT_DASHBOARD_PORT,
                 "metrics": DEFAULT_METRICS_PORT, "serve": 8000}
#: the harness's cuts of a Ray node's size (two shared cores here)
HARNESS_PARAMS = {"num-cpus": "1", "object-store-memory": "78643200"}
WAIT_GCS = """
					SECONDS=0
					while true; do
						if (( SECONDS <= 120 )); then
							if ray health-check --address {addr}:{port} > /dev/null 2>&1; then
								echo "GCS is ready."
								break
							fi
							echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."
						else
							if ray health-check --address {addr}:{port}; then
								echo "GCS is ready. Any error messages above can be safely ignored."
								break
							fi
							echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready. For troubleshooting, refer to the FAQ at https://docs.ray.io/en/master/cluster/kubernetes/troubleshooting.html."
						fi
						sleep 5
					done
				"""  # noqa: E501 (KubeRay's script, verbatim)


def bash_command(options: str = "") -> list[str]:
    """utils.GetContainerCommand: ``/bin/bash -c<options> --``."""
    return ["/bin/bash", f"-c{options}", "--"]


def _quantity(value: Any) -> float:
    text = str(value)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30,
             "Ti": 2 ** 40}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * units[unit]
    return float(text)


def convert_params(params: dict[str, str]) -> str:
    """common/pod.go convertParamMap: sorted ``--key=value``; "true" is a bare ``--key``, "false" is left out
    (except for log-color and include-dashboard)."""
    flags = ""
    for key in sorted(params):
        value = str(params[key])
        if value.lower() in ("true", "false") and key not in ("log-color", "include-dashboard"):
            if value.lower() == "true":
                flags += f" --{key} "
        else:
            flags += f" --{key}={value} "
    return flags


def _params(raw: dict[str, Any] | None) -> dict[str, str]:
    out = {}
    for key, value in (raw or {}).items():
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


class RayClusterPods:
    """The pods and head Service of one RayCluster spec; ``creator`` is "RayJob", "RayService" or "RayCluster"."""

    def __init__(self, spec: dict[str, Any], name: str, namespace: str, cluster: Any, creator: str,
                 owner_labels: dict[str, str] | None = None) -> None:
        self.spec = copy.deepcopy(spec)
        self.name = name
        self.namespace = namespace
        self.cluster = cluster
        self.creator = creator
        self.owner_labels = owner_labels or {}
        head_params = _params(self.spec["headGroupSpec"].get("rayStartParams"))
        self.head_port = head_params.get("port", str(DEFAULT_GCS_PORT))
        self.head_service = f"{name}-head-svc"
        self.fqdn = f"{self.head_service}.{namespace}.svc.{CLUSTER_DOMAIN}"
        self.head: Pod | None = None
        self.workers: list[Pod] = []
        self.ready: set[str] = set()

    @property
    def pods(self) -> list[Pod]:
        return [p for p in [self.head, *self.workers] if p is not None]

    def service_ports(self) -> dict[str, int]:
        """The head Service's ports (common/service.go getServicePorts)."""
        container = self.spec["headGroupSpec"]["template"]["spec"]["containers"][0]
        ports = {str(p.get("name") or f"{p['containerPort']}-port"): int(p["containerPort"])
                 for p in container.get("ports") or []}
        ports = ports or dict(DEFAULT_PORTS)
        ports.setdefault("metrics", DEFAULT_METRICS_PORT)
        return ports

    def dashboard_url(self) -> str:
        """utils.FetchHeadServiceURL: ``<head-svc>.<ns>.svc.cluster.local:<the port named dashboard>``."""
        port = self.service_ports().get("dashboard")
        if port is None:
            raise LookupError(f"Service {self.head_service}: dashboard port is not found (the head container names "
                              "ports but none 'dashboard'): KubeRay has no dashboard URL to reach "
                              "(utils.FetchHeadServiceURL)")
        return f"{self.fqdn}:{port}"

    def head_service_object(self, name: str | None = None) -> dict[str, Any]:
        """The head Service (common/service.go BuildServiceForHeadPod; a RayJob's or RayService's own copy takes the
        owner's name, BuildHeadServiceForRayJob)."""
        ports = [{"name": n, "port": p, "targetPort": p, "appProtocol": "tcp"} for n, p in self.service_ports().items()]
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name or self.head_service, "namespace": self.namespace},
                "spec": {"clusterIP": "None", "ports": ports,
                         "selector": {"ray.io/cluster": self.name, "ray.io/node-type": "head",
                                      "ray.io/identifier": f"{self.name}-head"}}}

    def _labels(self, template: dict[str, Any], node_type: str, group: str) -> dict[str, str]:
        labels = {k: v for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
                  if k not in ("ray.io/node-type", "ray.io/group", "ray.io/cluster")}
        return {"ray.io/is-ray-node": "yes", "ray.io/cluster": self.name, "ray.io/node-type": node_type,
                "ray.io/group": group, "ray.io/identifier": f"{self.name}-{node_type}",
                "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator",
                **labels, **self.owner_labels}

    def _start_params(self, params: dict[str, str], node_type: str, resources: dict[str, Any], ip: str) -> str:
        """setMissingRayStartParams + generateRayStartCommand, with the harness's changes (see the docstring)."""
        if node_type == "worker":
            params.setdefault("address", f"{self.fqdn}:{self.head_port}")
        else:
            params.setdefault("dashboard-host", "0.0.0.0")
        params.setdefault("metrics-export-port", str(DEFAULT_METRICS_PORT))
        params["block"] = "true"
        params.setdefault("dashboard-agent-listen-port", str(DEFAULT_AGENT_PORT))
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        cpu = limits.get("cpu") or requests.get("cpu")
        if "num-cpus" not in params and cpu and _quantity(cpu) > 0:
            params["num-cpus"] = str(int(_quantity(cpu)))
        if "memory" not in params and limits.get("memory"):
            params["memory"] = str(int(_quantity(limits["memory"])))
        gpus = sum(_quantity(v) for k, v in limits.items() if k.endswith("gpu"))
        if self.creator == "RayService" and "num-gpus" not in params and gpus > 0:
            params["num-gpus"] = str(int(gpus))
            self.cluster.note(f"{self.creator} {self.name}: ray start's num-gpus kept from the GPU limits as KubeRay "
                              "sets it (Ray places GPU actors as on the cluster; the pods have no GPU here)")
        elif any(DEVICE_RESOURCES.match(k) for k in limits):
            self.cluster.note(f"{self.creator} {self.name}: GPU/accelerator limits not turned into ray start's "
                              "num-gpus/resources (the harness drops them)")
        cuts = {k: v for k, v in HARNESS_PARAMS.items() if params.get(k) != v}
        if cuts:
            said = ", ".join(f"{k}={v}" for k, v in cuts.items())
            self.cluster.note(f"{self.creator} {self.name}: ray start's {said} set by the harness (two shared cores "
                              "here)")
        params.update(HARNESS_PARAMS)
        params["node-ip-address"] = ip
        self.cluster.note(f"{self.creator} {self.name}: ray start's node-ip-address set to each pod's 127.0.0.N by "
                          "the harness (one network here)")
        if node_type == "worker":
            from mlrecipe.ports import free_port

            params["dashboard-agent-listen-port"] = str(free_port())
            params["metrics-export-port"] = str(free_port())
            self.cluster.note(f"{self.creator} {self.name}: worker pods get free ports for ray start's "
                              "dashboard-agent-listen-port and metrics-export-port (the head keeps 52365 and 8080; "
                              "pods share one network here)")
        head = "--head " if node_type == "head" else ""
        return f"ray start {head}{convert_params(params)}"

    def _env(self, node_type: str, start_cmd: str) -> list[dict[str, Any]]:
        def field(path: str) -> dict[str, Any]:
            return {"fieldRef": {"fieldPath": path}}

        env: list[dict[str, Any]] = []
        ip = "127.0.0.1" if node_type == "head" else self.fqdn
        if node_type == "worker":
            env += [{"name": "FQ_RAY_IP", "value": ip}, {"name": "RAY_IP", "value": ip.split(".")[0]}]
        env += [{"name": "RAY_CLUSTER_NAME", "valueFrom": field("metadata.labels['ray.io/cluster']")},
                {"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": field("metadata.name")},
                {"name": "RAY_NODE_TYPE_NAME", "valueFrom": field("metadata.labels['ray.io/group']")},
                {"name": "KUBERAY_GEN_RAY_START_CMD", "value": start_cmd},
                {"name": "RAY_PORT", "value": self.head_port}]
        if self.creator == "RayService":
            env += [{"name": "RAY_TIMEOUT_MS_TASK_WAIT_FOR_DEATH_INFO", "value": "0"},
                    {"name": "RAY_GCS_SERVER_REQUEST_TIMEOUT_SECONDS", "value": "5"},
                    {"name": "RAY_SERVE_KV_TIMEOUT_S", "value": "5"}]
        env += [{"name": "RAY_ADDRESS", "value": f"{ip}:{self.head_port}"},
                {"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"}]
        if node_type == "head":
            env.append({"name": "RAY_USAGE_STATS_EXTRA_TAGS",
                        "value": f"kuberay_version={KUBERAY_VERSION};kuberay_crd={self.creator}"})
        env.append({"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"})
        return env

    def _pod(self, group_spec: dict[str, Any], node_type: str, group: str) -> Pod:
        template = copy.deepcopy(group_spec["template"])
        prefix = f"{self.name}-head" if node_type == "head" else f"{self.name}-{group}-worker"
        name = f"{prefix[:56]}-{suffix()}"
        obj = self.cluster.new_pod(template, name, self.namespace)
        obj["metadata"]["labels"] = self._labels(template, node_type, group)
        spec = obj["spec"]
        container = spec["containers"][0]
        if node_type == "worker":
            init = {"name": "wait-gcs-ready", "image": container.get("image", ""),
                    "command": bash_command(), "args": [WAIT_GCS.format(addr=self.fqdn, port=self.head_port)],
                    "env": copy.deepcopy(container.get("env") or []),
                    "volumeMounts": copy.deepcopy(container.get("volumeMounts") or [])}
            spec["initContainers"] = [*(spec.get("initContainers") or []), init]
        if not any(m.get("mountPath") == "/dev/shm" for m in container.get("volumeMounts") or []):
            spec.setdefault("volumes", []).append({"name": "shared-mem", "emptyDir": {"medium": "Memory"}})
            container.setdefault("volumeMounts", []).append({"name": "shared-mem", "mountPath": "/dev/shm"})
        given = " ".join(shlex.quote(str(w)) for w in [*(container.get("command") or []),
                                                       *(container.get("args") or [])])
        start_cmd = self._start_params(_params(group_spec.get("rayStartParams")), node_type,
                                       container.get("resources") or {}, obj["status"]["podIP"])
        if "ray start" not in given:
            generated = f"ulimit -n 65536; {start_cmd}"
            container["command"] = bash_command()
            container["args"] = [f"{given} && {generated}" if given else generated]
        for init in spec.get("initContainers") or []:
            init["env"] = [*(init.get("env") or []), {"name": "FQ_RAY_IP", "value": self.fqdn},
                           {"name": "RAY_IP", "value": self.head_service}]
        container["env"] = [*(container.get("env") or []), *self._env(node_type, start_cmd)]
        return Pod(obj, self.cluster)

    def start(self) -> None:
        """The head Service, then the head pod and every worker group's pods (``replicas`` within min/max)."""
        self.cluster.store.add(self.head_service_object())
        head = self._pod(self.spec["headGroupSpec"], "head", "headgroup")
        self.cluster.register(head)
        made = [head]
        for group in self.spec.get("workerGroupSpecs") or []:
            if int(group.get("numOfHosts", 1)) > 1:
                self.cluster.note(f"{self.creator} {self.name}: numOfHosts {group['numOfHosts']} of group "
                                  f"{group['groupName']} run as one host per replica")
            low, high = int(group.get("minReplicas", 0)), int(group.get("maxReplicas", 2 ** 31))
            replicas = min(max(int(group.get("replicas", low)), low), high)
            for _ in range(replicas):
                pod = self._pod(group, "worker", group["groupName"])
                self.cluster.register(pod)
                made.append(pod)
        self.head, self.workers = made[0], made[1:]
        for pod in made:
            pod.start()

    def _healthy(self, pod: Pod, port: int, path: str) -> bool:
        try:
            conn = http.client.HTTPConnection(pod.ip, port, timeout=2)
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read(4096)
            conn.close()
            return response.status == 200 and b"success" in body
        except (OSError, http.client.HTTPException):
            return False

    def _agent_port(self, pod: Pod) -> int:
        start = next(e["value"] for e in pod.obj["spec"]["containers"][0]["env"]
                     if e["name"] == "KUBERAY_GEN_RAY_START_CMD")
        return int(start.split("--dashboard-agent-listen-port=")[1].split()[0])

    def failed_pod(self) -> Pod | None:
        """A pod that ended (a Ray container exits only on failure: ``ray start --block``)."""
        return next((p for p in self.pods if p.done.is_set()), None)

    def is_ready(self) -> bool:
        """Every pod running and ready by KubeRay's injected probes (checked at most once per call per pod)."""
        for pod in self.pods:
            if pod.name in self.ready or not pod.running.is_set():
                continue
            ok = self._healthy(pod, self._agent_port(pod), "/api/local_raylet_healthz")
            if ok and pod is self.head:
                ok = self._healthy(pod, DEFAULT_DASHBOARD_PORT, "/api/gcs_healthz")
            if ok:
                self.ready.add(pod.name)
        return len(self.ready) == len(self.pods)

    def stop(self) -> None:
        for pod in reversed(self.pods):
            pod.stop()


class RayClusterController(Controller):
    """A bare ray.io/v1 RayCluster (raycluster_controller.go): its pods and head Service, Ready (calculateStatus)
    when every pod is running and ready; it keeps running until the harness's run ends."""

    kind = "RayCluster"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        self.ray = RayClusterPods(obj["spec"], self.name, self.namespace, cluster, "RayCluster")

    def start(self) -> None:
        self.ray.start()
        self.pods = self.ray.pods

    def poll(self) -> Outcome | None:
        pod = self.ray.failed_pod()
        if pod is not None:
            return self.failed(pod, "a Ray pod exited (ray start --block ends only on failure)")
        if self.ray.is_ready():
            return Outcome(True, self.workload, f"ready ({len(self.ray.pods)} Ray pods ready)")
        return None

    def stop(self) -> None:
        self.ray.stop()
