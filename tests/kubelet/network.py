"""Pod addresses and names: each pod gets its own loopback address 127.0.0.N and an ``/etc/hosts`` of the DNS names
cluster DNS would answer for it (CoreDNS's Kubernetes plugin: pod hostname + subdomain records of a headless Service,
a Service's own names, each in its ``<ns>.svc`` and ``<ns>.svc.cluster.local`` forms)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

CLUSTER_DOMAIN = "cluster.local"


def dns_forms(name: str, namespace: str) -> list[str]:
    """The names a pod in ``namespace`` may use for the in-namespace name ``name`` (``svc`` or ``host.svc``)."""
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}"]


@dataclass
class AddressBook:
    """Loopback addresses for pods and the names that resolve to them (shared by every pod of a harness run)."""

    first: int = 2
    _next: int = 0
    _names: dict[str, list[str]] = field(default_factory=dict)  #: address -> names, in order of registration
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allocate(self) -> str:
        """A fresh address 127.0.0.N (N from ``first`` to 254); more pods than that is an error."""
        with self._lock:
            number = self.first + self._next
            if number > 254:
                raise RuntimeError("more than 253 pods: the harness gives each pod one address of 127.0.0.0/24")
            self._next += 1
            return f"127.0.0.{number}"

    def add(self, address: str, names: list[str]) -> None:
        """Let ``names`` resolve to ``address``."""
        with self._lock:
            known = self._names.setdefault(address, [])
            known.extend(n for n in names if n not in known)

    def remove(self, address: str) -> None:
        with self._lock:
            self._names.pop(address, None)

    def hosts_file(self, own_address: str, own_names: list[str]) -> str:
        """``/etc/hosts`` of a pod: localhost, its own names first (as the kubelet writes them), then every other
        name the cluster's DNS would answer."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
                 f"{own_address}\t{' '.join(own_names)}"]
        with self._lock:
            for address, names in self._names.items():
                if names:
                    lines.append(f"{address}\t{' '.join(names)}")
        return "\n".join(lines) + "\n"
