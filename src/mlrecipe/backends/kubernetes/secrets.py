"""Credentials of a Kubernetes step: env values that look like credentials go into a Secret, never a manifest.

The rule is :func:`mlrecipe.credentials.is_secret` (the one the Slurm backend applies). Every env list
the charts render (``train``/``process``/``server.env``, ``mpirun.env``, ``ray.env``, the top-level
``env`` of hf-snapshot and ``mlrecipe-lib.pipeline_env``) is split: a credential entry keeps its name
and loses its value, and ``mlrecipe-lib.secret_env`` tells the library chart to render that name as
``valueFrom.secretKeyRef`` of the step's Secret. The Secret itself is not a template of the chart (its
value would end up in the Helm release's stored manifests): the backend creates it through the API
before ``helm install`` and deletes it at uninstall. Ray runtime envs (``ray.runtime_env_yaml``,
``ray.serve_config_v2`` applications) cannot reference a Secret: their credential ``env_vars`` move to
the env of the Ray containers, which every Ray worker process inherits (:func:`lift_ray_env_vars`).
Pure functions, no I/O.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import yaml

from mlrecipe.credentials import MASK, is_secret
from mlrecipe.errors import SecretConflictError

__all__ = ["SecretConflictError", "lift_ray_env_vars", "masked", "secret_manifest", "split_values",
           "with_secret_ref"]

#: The library chart's values key (the values a workload chart hands to its ``mlrecipe-lib`` dependency).
LIB = "mlrecipe-lib"

#: Paths of the env lists ([{name, value}]) in a chart's values.
ENV_PATHS: tuple[tuple[str, ...], ...] = (
    ("train", "env"),
    ("process", "env"),
    ("server", "env"),
    ("mpirun", "env"),
    ("ray", "env"),
    ("env",),
    (LIB, "pipeline_env"),
)

MAX_NAME = 63


def secret_name(release: str, step: str) -> str:
    """The Secret of one step: ``<release>-<step>-env``, at most 63 characters (then ending in a hash)."""
    full = f"{release}-{step}-env"
    if len(full) <= MAX_NAME:
        return full
    return f"{full[:MAX_NAME - 9].rstrip('-')}-{hashlib.sha256(full.encode()).hexdigest()[:8]}"


def is_secret_entry(entry: Any) -> bool:
    """Whether a values env entry holds a credential: a credential-like name and a non-empty value."""
    return (isinstance(entry, dict) and isinstance(entry.get("name"), str)
            and is_secret(entry["name"], entry.get("value")))


def split_env(env: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """``env`` with the values of credential entries removed (name kept), and those values by name."""
    plain: list[Any] = []
    secret: dict[str, str] = {}
    for entry in env:
        if is_secret_entry(entry):
            name, value = entry["name"], str(entry["value"])
            if secret.get(name, value) != value:
                raise SecretConflictError(f"{name} is set twice with different values")
            secret[name] = value
            plain.append({k: v for k, v in entry.items() if k != "value"})
        else:
            plain.append(entry)
    return plain, secret


def _env_list(values: dict[str, Any], path: tuple[str, ...]) -> list[Any] | None:
    node: Any = values
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, list) else None


def split_values(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Split every env list of chart ``values``: a deep copy without credential values, and those values.

    The copy holds no ``mlrecipe-lib.secret_env`` yet (see :func:`with_secret_ref`). Raises
    :class:`SecretConflictError` (naming the lists) when one name has different values in two lists.
    """
    out = copy.deepcopy(values)
    secret: dict[str, str] = {}
    where: dict[str, str] = {}
    for path in ENV_PATHS:
        env = _env_list(out, path)
        if env is None:
            continue
        plain, found = split_env(env)
        for name, value in found.items():
            if secret.get(name, value) != value:
                raise SecretConflictError(f"{name} has different values in {where[name]} and {'.'.join(path)}; "
                                          "the step's Secret holds one value per name")
            secret[name] = value
            where.setdefault(name, ".".join(path))
        parent = out
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = plain
    return out, secret


#: Ray values holding runtime envs, and the key the reference charts wrap their YAML string in.
RAY_DOCS = {"runtime_env_yaml": "runtimeEnvYAML", "serve_config_v2": "serveConfigV2"}


def _runtime_envs(key: str, doc: dict[str, Any]) -> list[Any]:
    if key == "runtime_env_yaml":
        return [doc]
    apps = doc.get("applications")
    return [app.get("runtime_env") for app in apps if isinstance(app, dict)] if isinstance(apps, list) else []


def lift_ray_env_vars(values: dict[str, Any], block: str) -> tuple[dict[str, Any], list[str]]:
    """Move credential ``env_vars`` of the Ray runtime envs into the env list of the Ray containers.

    The containers' list is ``ray.env`` when set (or when the chart has no ``block``), else
    ``<block>.env`` (the charts' rule). Returns the new values (``values`` itself when nothing moved;
    a runtime env given as a YAML string is dumped again) and the names moved.
    """
    ray = values.get("ray")
    if not isinstance(ray, dict):
        return values, []
    new_ray = dict(ray)
    moved: dict[str, str] = {}
    for key, wrapper in RAY_DOCS.items():
        raw = ray.get(key)
        outer: dict[str, Any] | None = raw if isinstance(raw, dict) and wrapper in raw else None
        inner = outer[wrapper] if outer is not None else raw
        try:
            doc = yaml.safe_load(inner) if isinstance(inner, str) else copy.deepcopy(inner)
        except yaml.YAMLError:
            continue
        if not isinstance(doc, dict):
            continue
        for runtime_env in _runtime_envs(key, doc):
            env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, dict) else None
            if not isinstance(env_vars, dict):
                continue
            for name in [n for n, v in env_vars.items() if is_secret_entry({"name": str(n), "value": v})]:
                value = str(env_vars.pop(name))
                if moved.get(str(name), value) != value:
                    raise SecretConflictError(f"{name} has two different values in the Ray runtime envs")
                moved[str(name)] = value
        if moved:
            text = yaml.safe_dump(doc, sort_keys=False) if isinstance(inner, str) else doc
            new_ray[key] = {**outer, wrapper: text} if outer is not None else text
    if not moved:
        return values, []
    out = {**values, "ray": new_ray}
    if ray.get("env") or not isinstance(values.get(block), dict):
        target: list[Any] = list(ray.get("env") or [])
        new_ray["env"] = target
    else:
        target = list(values[block].get("env") or [])
        out[block] = {**values[block], "env": target}
    have = {(e.get("name"), str(e.get("value"))) for e in target if isinstance(e, dict)}
    target += [{"name": n, "value": v} for n, v in moved.items() if (n, v) not in have]
    return out, sorted(moved)


def with_secret_ref(values: dict[str, Any], name: str, keys: list[str]) -> dict[str, Any]:
    """``values`` whose ``mlrecipe-lib.secret_env`` maps each of ``keys`` to the same key of Secret ``name``."""
    lib = dict(values.get(LIB) or {})
    lib["secret_env"] = {"name": name, "keys": {k: k for k in sorted(keys)}}
    return {**values, LIB: lib}


def secret_manifest(name: str, namespace: str, data: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    """The Secret (v1, Opaque, ``stringData``) holding ``data``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
        "stringData": dict(sorted(data.items())),
    }


def masked(manifest: dict[str, Any]) -> dict[str, Any]:
    """A copy of a Secret manifest for display: every ``stringData`` / ``data`` value replaced by the mask."""
    out = copy.deepcopy(manifest)
    for key in ("stringData", "data"):
        if isinstance(out.get(key), dict):
            out[key] = {k: MASK for k in out[key]}
    return out
