"""The objects of the stream and those the controllers create (ConfigMaps, Secrets, Services), by kind and name."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any


class NotFound(LookupError):
    """A referenced object does not exist: the message is the API server's (``secret "x" not found``)."""


@dataclass
class Store:
    """What the API server would hold: every object by (kind, namespace, name)."""

    default_namespace: str = "default"
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    def namespace_of(self, obj: dict[str, Any]) -> str:
        return (obj.get("metadata") or {}).get("namespace") or self.default_namespace

    def add(self, obj: dict[str, Any]) -> None:
        """Create ``obj`` (a later object of the same kind and name replaces it, as ``kubectl apply`` would)."""
        self.objects[(obj["kind"], self.namespace_of(obj), obj["metadata"]["name"])] = obj

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.objects[(kind, namespace, name)]
        except KeyError:
            raise NotFound(f'{kind.lower()} "{name}" not found') from None

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for (k, _, _), obj in self.objects.items() if k == kind]

    def config_data(self, kind: str, namespace: str, name: str) -> dict[str, bytes]:
        """The data of a ConfigMap or Secret as bytes (a Secret's ``data`` base64-decoded, ``stringData`` over it)."""
        obj = self.get(kind, namespace, name)
        out: dict[str, bytes] = {}
        if kind == "Secret":
            for key, value in (obj.get("data") or {}).items():
                out[key] = base64.b64decode(str(value))
            for key, value in (obj.get("stringData") or {}).items():
                out[key] = str(value).encode()
        else:
            for key, value in (obj.get("data") or {}).items():
                out[key] = str(value).encode()
            for key, value in (obj.get("binaryData") or {}).items():
                out[key] = base64.b64decode(str(value))
        return out
