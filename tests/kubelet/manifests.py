"""Reading the multi-document manifest stream that ``mlrecipe template`` / ``run --dry-run -b kubernetes`` print."""

from __future__ import annotations

from typing import Any

import yaml


class BadManifest(ValueError):
    """The stream is not a list of Kubernetes objects: the harness exits 2 and starts nothing."""


def load_stream(text: str, source: str) -> list[dict[str, Any]]:
    """Every object of ``text`` in document order (comments and empty documents skipped)."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise BadManifest(f"{source}{line}: not YAML: {getattr(exc, 'problem', exc)}") from None
    objects: list[dict[str, Any]] = []
    for number, doc in enumerate(docs, 1):
        if doc is None:
            continue
        if not isinstance(doc, dict) or not doc.get("kind") or not doc.get("apiVersion"):
            raise BadManifest(f"{source}: document {number}: not a Kubernetes object (no kind/apiVersion)")
        if not (doc.get("metadata") or {}).get("name"):
            raise BadManifest(f"{source}: document {number}: {doc['kind']} has no metadata.name")
        objects.append(doc)
    if not objects:
        raise BadManifest(f"{source}: no Kubernetes objects in the stream")
    return objects
