"""Readiness probes as the kubelet runs them (pkg/probe): HTTP GET (2xx/3xx is success) to the pod's address,
TCP connect, or a command in the container (exit 0). ``initialDelaySeconds`` is waited; then the probe runs every
``periodSeconds`` (at most 2 s apart here), each bounded by ``timeoutSeconds``."""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kubelet.pods import Pod


def _port(value: Any, container: dict[str, Any]) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"probe port {value!r} names no port of container {container['name']}")


def probe_once(probe: dict[str, Any], container: dict[str, Any], address: str, init_pid: int | None) -> bool:
    """One probe; True on success."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            conn_type = http.client.HTTPSConnection if get.get("scheme") == "HTTPS" else http.client.HTTPConnection
            conn = conn_type(get.get("host") or address, _port(get["port"], container), timeout=timeout)
            headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
            conn.request("GET", get.get("path") or "/", headers=headers)
            status = conn.getresponse().status
            conn.close()
            return 200 <= status < 400
        if "tcpSocket" in probe:
            sock = probe["tcpSocket"]
            with socket.create_connection((sock.get("host") or address, _port(sock["port"], container)), timeout):
                return True
        if "exec" in probe:
            if init_pid is None:
                return False
            done = subprocess.run(["nsenter", "-t", str(init_pid), "-m", "-u", "-p", "--", *probe["exec"]["command"]],
                                  capture_output=True, timeout=max(timeout, 1.0))
            return done.returncode == 0
    except (OSError, http.client.HTTPException, subprocess.TimeoutExpired):
        return False
    raise ValueError(f"probe {sorted(probe)} is not covered by the harness")


class ReadinessProbes:
    """Every container's readinessProbe of the pods of one workload, on the kubelet's schedule: the first run after
    ``initialDelaySeconds``, then every ``periodSeconds`` (at most 2 s apart here). A pod is Ready once it runs, has
    not ended, and each probe of its containers succeeded (a container without one counts as ready)."""

    def __init__(self) -> None:
        self.next_probe: dict[tuple[str, str], float] = {}

    def ready(self, pod: Pod) -> bool:
        """Whether ``pod`` is Ready now (probes that are due run; one not yet due counts as not ready)."""
        if not pod.running.is_set() or pod.done.is_set():
            return False
        now = time.monotonic()
        for container in pod.obj["spec"]["containers"]:
            probe = container.get("readinessProbe")
            if probe is None:
                continue
            key = (pod.name, container["name"])
            if key not in self.next_probe:
                self.next_probe[key] = now + float(probe.get("initialDelaySeconds", 0))
            if now < self.next_probe[key]:
                return False
            self.next_probe[key] = now + min(float(probe.get("periodSeconds", 10)), 2.0)
            process = pod.containers.get(container["name"])
            if not probe_once(probe, container, pod.ip, process.namespace_init() if process else None):
                return False
        return True

    def forget(self, pod_name: str) -> None:
        """A pod started again under ``pod_name``: its probes wait ``initialDelaySeconds`` anew."""
        self.next_probe = {k: v for k, v in self.next_probe.items() if k[0] != pod_name}
