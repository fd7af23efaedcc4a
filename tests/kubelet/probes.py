"""Readiness probes as the kubelet runs them (pkg/probe): HTTP GET (2xx/3xx is success) to the pod's address,
TCP connect, or a command in the container (exit 0). ``initialDelaySeconds`` is waited; then the probe runs every
``periodSeconds`` (at most 2 s apart here), each bounded by ``timeoutSeconds``."""

from __future__ import annotations

import http.client
import socket
import subprocess
from typing import Any


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
