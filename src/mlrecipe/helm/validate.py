"""Offline validation of rendered manifests.

Core kinds are checked against the Kubernetes OpenAPI schemas shipped by ``kubernetes-validate``
in strict mode (unknown fields rejected); custom resources against the ``openAPIV3Schema`` of
their CRD in ``../shared/crds/`` (or ``$MLRECIPE_CRDS_DIR``), with ``additionalProperties: false``
added wherever the CRD does not preserve unknown fields, so typos fail. Pod templates embedded in
custom resources are also checked against the strict core ``PodTemplateSpec`` schema.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlrecipe.helm._engine import parse_yaml

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def crds_dir() -> Path:
    """The CRD directory: ``$MLRECIPE_CRDS_DIR``, else ``<repo>/../shared/crds``."""
    env = os.environ.get("MLRECIPE_CRDS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "crds"


def _close(schema: Any) -> Any:
    """Copy of an OpenAPI v3 CRD schema as JSON Schema: closed objects, nullable, int-or-string."""
    if isinstance(schema, list):
        return [_close(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _close(v) for k, v in schema.items()}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if schema.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in schema and "additionalProperties" not in schema and not preserve:
        out["additionalProperties"] = False
    return out


@functools.cache
def _crd_validators(directory: str) -> dict[tuple[str, str], Any]:
    import jsonschema

    found: dict[tuple[str, str], Any] = {}
    for path in sorted(Path(directory).rglob("*.yaml")):
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for doc in text.split("\n---"):
            crd = parse_yaml(doc) if doc.strip() else None
            if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec.get("versions", []):
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema is None:
                    continue
                schema = _close(copy.deepcopy(schema))
                # apiVersion/kind/metadata are checked by the API server itself.
                schema.setdefault("properties", {}).update(
                    {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                    }
                )
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                found[key] = jsonschema.Draft7Validator(schema)
    return found


def _schema_dir(kube_version: str) -> str:
    from kubernetes_validate import utils

    wanted = utils.major_minor(kube_version.lstrip("v"))
    versions = [v for v in utils.all_versions() if utils.major_minor(v) <= wanted]
    if not versions:
        raise ValueError(f"kubernetes-validate has no schemas for Kubernetes {kube_version}")
    return f"kubernetes-json-schema/v{versions[-1]}-local-strict"


@functools.cache
def _core_validator(kube_version: str, filename: str) -> Any:
    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    schema_dir = _schema_dir(kube_version)
    try:
        schema = utils.schema_contents(f"{schema_dir}/{filename}", kube_version)
    except FileNotFoundError:
        return None
    definitions = utils.schema_contents(f"{schema_dir}/_definitions.json", kube_version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _core_filename(api_version: str, kind: str) -> str:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


def _format(where: str, err: Any) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return f"{where}{path}: {err.message}"


def _pod_templates(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, template) for every pod template ({metadata?, spec: {containers}}) inside ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}"
            spec = value.get("spec") if isinstance(value, dict) else None
            if key.endswith("emplate") and isinstance(spec, dict) and "containers" in spec:
                yield sub, value
            else:
                yield from _pod_templates(value, sub)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _pod_templates(value, f"{path}[{i}]")


def _metadata_errors(where: str, meta: dict[str, Any]) -> list[str]:
    errors = []
    name = str(meta.get("name", ""))
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        errors.append(f"{where}.metadata.name: {name!r} is not a valid DNS subdomain name")
    for field in ("labels", "annotations"):
        for key, value in (meta.get(field) or {}).items():
            if not isinstance(value, str):
                errors.append(f"{where}.metadata.{field}.{key}: value must be a string")
            elif field == "labels" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                errors.append(f"{where}.metadata.labels.{key}: {value!r} is not a valid label value")
    return errors


def validate_manifests(objs: list[dict[str, Any]], kube_version: str = "1.33") -> list[str]:
    """Validate rendered manifests; returns one message per problem ("Kind/name.field: message").

    An empty list means every object passed. Kinds with neither a core schema nor a CRD are
    reported as unknown.
    """
    crds = _crd_validators(str(crds_dir()))
    errors: list[str] = []
    for obj in objs:
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        where = f"{kind}/{(obj.get('metadata') or {}).get('name', '?')}"
        errors += _metadata_errors(where, obj.get("metadata") or {})
        crd = crds.get((api_version, kind))
        if crd is not None:
            errors += [_format(where, e) for e in crd.iter_errors(obj)]
            pod_schema = _core_validator(kube_version, "podtemplatespec-v1.json")
            for sub, template in _pod_templates(obj.get("spec"), ".spec"):
                errors += [_format(where + sub, e) for e in pod_schema.iter_errors(template)]
            continue
        core = _core_validator(kube_version, _core_filename(api_version, kind))
        if core is None:
            errors.append(
                f"{where}: no schema for {api_version} {kind} (Kubernetes {kube_version}, CRDs in {crds_dir()})"
            )
            continue
        errors += [_format(where, e) for e in core.iter_errors(json.loads(json.dumps(obj)))]
    return errors
