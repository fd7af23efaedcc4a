"""A container's environment as the kubelet builds it (kubelet_pods.go makeEnvironmentVariables, Kubernetes 1.33):
``envFrom`` first, then ``env`` in order (later wins), ``$(VAR)`` expanded against what is defined so far, values
from ConfigMaps and Secrets by key. A missing Secret, ConfigMap or key (not ``optional``) is the kubelet's
CreateContainerConfigError with its own message."""

from __future__ import annotations

import re
from typing import Any

from tests.kubelet.store import NotFound, Store

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class ContainerConfigError(RuntimeError):
    """The kubelet could not build the container's config (CreateContainerConfigError)."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (third_party/forked/golang/expansion): a defined ``$(VAR)`` is replaced,
    an undefined one stays as written, ``$$`` is one ``$``."""
    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)
    return _REF.sub(sub, text)


def _key(store: Store, kind: str, namespace: str, ref: dict[str, Any]) -> str | None:
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    try:
        data = store.config_data(kind, namespace, name)
    except NotFound as exc:
        if optional:
            return None
        raise ContainerConfigError(str(exc)) from None
    if key not in data:
        if optional:
            return None
        raise ContainerConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key].decode(errors="replace")


def _field(path: str, pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    simple = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
              "metadata.uid": meta.get("uid", ""), "spec.nodeName": "harness-node",
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
              "status.podIP": pod["status"]["podIP"], "status.hostIP": "127.0.0.1",
              "status.podIPs": pod["status"]["podIP"], "status.hostIPs": "127.0.0.1"}
    if path in simple:
        return str(simple[path])
    found = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if found:
        return str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
    raise ContainerConfigError(f"fieldRef {path} is not covered by the harness")


def container_env(container: dict[str, Any], pod: dict[str, Any], store: Store, base: dict[str, str]) -> dict[str, str]:
    """The env of ``container`` in ``pod`` over ``base`` (the image's env: PATH, HOME, HOSTNAME)."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(field)
            if ref is None:
                continue
            try:
                data = store.config_data(kind, namespace, ref.get("name", ""))
            except NotFound as exc:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(str(exc)) from None
            for key, raw in data.items():
                if _ENV_NAME.match(prefix + key):
                    env[prefix + key] = raw.decode(errors="replace")
    for entry in container.get("env") or []:
        name = entry["name"]
        if "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), {**base, **env})
            continue
        source = entry["valueFrom"]
        value: str | None
        if "secretKeyRef" in source:
            value = _key(store, "Secret", namespace, source["secretKeyRef"])
        elif "configMapKeyRef" in source:
            value = _key(store, "ConfigMap", namespace, source["configMapKeyRef"])
        elif "fieldRef" in source:
            value = _field(source["fieldRef"]["fieldPath"], pod)
        elif "resourceFieldRef" in source:
            value = "0"  # limits/requests of this machine are not modelled; see the package docstring
        else:
            raise ContainerConfigError(f"env {name}: valueFrom {sorted(source)} is not covered by the harness")
        if value is not None:
            env[name] = value
    return {**base, **env}
