"""Render the mlrecipe charts with Helm's own engine (helm_python embeds Helm's Go SDK).

``render_chart`` returns the manifests as dicts in Helm's install order, ``render_text`` the YAML
stream as ``helm template`` prints it. Schema violations and the templates' own checks (``required``)
raise :class:`ChartRenderError` whose ``errors`` carry dotted field paths (``resources.nnodes: got string,
want integer``, ``image: required: set image to ...``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe.data import data_dir
from mlrecipe.errors import ChartRenderError, SchemaError
from mlrecipe.helm._engine import LOCK, load_chart, parse_yaml

_SCHEMA_LINE = re.compile(r"^- at '(?P<ptr>[^']*)': (?P<msg>.*)$")
#: A template's ``required``/``fail``: ``execution error at (chart/templates/x.yaml:19:12): MESSAGE``.
_EXECUTION_ERROR = re.compile(r"execution error at \((?P<template>[^)]*)\): (?P<msg>.*)", re.S)
#: The charts' convention: a check's message starts with the values path it checks ("image is required: ...").
_CHECKED_PATH = re.compile(r"^(?P<path>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*|\[\d+\])*)(?: is |: )(?P<rest>.*)", re.S)
#: Go's report of a template reading a field of a missing (null) value: ``at <.Values.a.b>: nil pointer ...``.
_NIL_VALUE = re.compile(r"at <\.Values\.(?P<path>[A-Za-z_][\w.-]*)>:\s*nil pointer evaluating")
_ADDITIONAL = re.compile(r"additional propert(?:y|ies) (?P<names>.+) not allowed")

#: Helm's install order of kinds (pkg/release/util/kind_sorter.go, InstallOrder), abridged.
_INSTALL_ORDER = [
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
]


@dataclass(frozen=True)
class RenderedDocument:
    """One manifest of a render: the template that produced it, its YAML text as Helm wrote it, and the object."""

    template: str
    text: str
    manifest: dict[str, Any]

    def install_rank(self, ranks: dict[str, int]) -> tuple[int, str, str]:
        """Sort key in Helm's install order: the kind's rank (unknown kinds last), then kind, then name."""
        kind = self.manifest.get("kind", "")
        return ranks.get(kind, len(ranks)), kind, self.manifest.get("metadata", {}).get("name", "")


def charts_root() -> Path:
    """The chart library ``charts/machine-learning``: in the installed package, else in the source tree."""
    return data_dir("charts") / "machine-learning"


def chart_path(catalog_name: str) -> Path:
    """Chart directory of a catalog name such as ``training/pytorchjob-distributed``."""
    path = charts_root() / catalog_name
    if not (path / "Chart.yaml").is_file():
        raise ChartRenderError(catalog_name, f"no chart at {path}")
    return path


def _pointer_to_path(pointer: str) -> str:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.strip("/").split("/") if p]
    out = ""
    for part in parts:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


def parse_schema_errors(message: str) -> list[SchemaError]:
    """Turn Helm's schema report ("- at '/a/b': msg" lines) into :class:`SchemaError` items.

    An "additional properties 'x' not allowed" error names the offending key in the path.
    """
    errors: list[SchemaError] = []
    for line in message.splitlines():
        m = _SCHEMA_LINE.match(line.strip())
        if not m:
            continue
        path, msg = _pointer_to_path(m.group("ptr")), m.group("msg")
        extra = _ADDITIONAL.search(msg)
        if extra:
            for name in re.findall(r"'([^']+)'", extra.group("names")):
                errors.append(SchemaError(f"{path}.{name}" if path else name, "unknown key (not allowed)"))
            continue
        errors.append(SchemaError(path, msg))
    # Helm also reports each parent of a failing field ("validation failed"): keep the leaves.
    return [
        e
        for e in errors
        if not (
            e.message == "validation failed" and any(o.path != e.path and o.path.startswith(e.path) for o in errors)
        )
    ]


def parse_template_check(message: str) -> list[SchemaError]:
    """A failed template check (``required``/``fail``) as the value it names, or [] when it names none.

    The charts' messages start with the values path they check and say what to set
    (``image is required: set image to ...``); the result is ``SchemaError("image", "required: set image to ...")``.
    """
    m = _EXECUTION_ERROR.search(message)
    checked = _CHECKED_PATH.match(m.group("msg").strip()) if m else None
    if checked is None:
        return _unreadable_value(message)
    return [SchemaError(checked.group("path"), checked.group("rest").strip())]


def _unreadable_value(message: str) -> list[SchemaError]:
    """A template that cannot read a value (``resources: null`` where the chart reads ``resources.nnodes``) as the
    value whose parent is missing, or [] when the message names no value."""
    m = _NIL_VALUE.search(message)
    if m is None:
        return []
    path = m.group("path")
    parent = path.rsplit(".", 1)[0] if "." in path else path
    return [SchemaError(parent, f"the chart reads {path}, but {parent} is empty or not a mapping: give it a mapping "
                        "or leave it out")]


def _non_finite(value: Any, path: str = "") -> list[SchemaError]:
    """Each ``.inf``/``.nan`` in ``value``: Helm reads values as JSON, which has no such number."""
    if isinstance(value, float) and not math.isfinite(value):
        return [SchemaError(path, f"{value} cannot be given to Helm (JSON has no infinity or NaN): quote it "
                            "('.inf') or give a number")]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    found: list[SchemaError] = []
    for key, item in items:
        found += _non_finite(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key))
    return found


def _render(chart_dir: Path, values: dict[str, Any], release: str, namespace: str) -> list[RenderedDocument]:
    import helm_python

    name = str(chart_dir)
    if non_finite := _non_finite(values):
        raise ChartRenderError(name, "invalid values", non_finite)
    try:
        with LOCK:
            chart = load_chart(str(Path(chart_dir).resolve()))
            out = chart.render(values=values, name=release, namespace=namespace, is_install=True)
    except helm_python.HelmValuesError as exc:
        raise ChartRenderError(name, exc.detail, parse_schema_errors(exc.detail)) from exc
    except helm_python.HelmError as exc:
        detail = getattr(exc, "detail", str(exc))
        raise ChartRenderError(name, detail, parse_template_check(detail)) from exc
    docs: list[RenderedDocument] = []
    for template in sorted(out, key=lambda t: (t.count("/charts/"), t)):
        if "/templates/" not in template or Path(template).name.startswith("_"):
            continue
        if template.endswith("NOTES.txt"):
            continue
        for doc in re.split(r"(?m)^---\s*$", out[template]):
            obj = parse_yaml(doc) if doc.strip() else None
            if obj is not None:
                docs.append(RenderedDocument(template, doc.strip("\n"), obj))
    return docs


def _documents(chart_dir: Path, values: dict[str, Any], release: str, namespace: str) -> list[RenderedDocument]:
    """The rendered manifests in Helm's install order."""
    ranks = {kind: i for i, kind in enumerate(_INSTALL_ORDER)}
    return sorted(_render(chart_dir, values, release, namespace), key=lambda doc: doc.install_rank(ranks))


def render_chart(chart_dir: Path, values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
    """Render ``chart_dir`` with ``values`` as release ``release`` in ``namespace``.

    Returns the manifests as dicts in Helm's install order (kind order, then name).
    Raises :class:`ChartRenderError` on schema violations (with field paths) and render failures.
    """
    return [doc.manifest for doc in _documents(Path(chart_dir), values, release, namespace)]


def render_text(chart_dir: Path, values: dict[str, Any], release: str, namespace: str) -> str:
    """Render like :func:`render_chart` but return the YAML stream as ``helm template`` prints it."""
    docs = _documents(Path(chart_dir), values, release, namespace)
    parts = [f"---\n# Source: {doc.template}\n{doc.text}\n" for doc in docs]
    return "".join(parts)


def load_values_file(path: Path) -> dict[str, Any]:
    """Read a values file (YAML mapping; empty file -> {}) through the hardened loader."""
    from mlrecipe.spec.yamlfile import load_yaml

    data = load_yaml(path).data or {}
    if not isinstance(data, dict):
        raise ChartRenderError(str(path), "a values file must hold a mapping")
    return data
