"""What a Kubernetes step still holds on the cluster, for ``mlrecipe debug-bundle``: its workload object, its pods,
each pod's log and the events of the workload and of every pod (read through the backend's one client)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from mlrecipe.backends.base import DebugRecord
from mlrecipe.backends.kubernetes import status
from mlrecipe.backends.kubernetes.cluster import KubeClient
from mlrecipe.backends.kubernetes.handle import KubernetesHandle
from mlrecipe.errors import MlrecipeError


def _asked(name: str, what: str, read: Callable[[], str]) -> DebugRecord:
    """A record of ``read()``'s text; the cluster's refusal or silence is the record's ``missing``."""
    try:
        return DebugRecord(name, read())
    except Exception as exc:  # a refusal, or an answer the client cannot read: the bundle is made all the same
        return DebugRecord(name, missing=f"{what}: {exc}")


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def events_table(events: list[dict[str, Any]]) -> str:
    """Events as ``kubectl get events`` lists them: last seen, type, reason, object, count, message (oldest first)."""
    def when(e: dict[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")

    lines = []
    for e in sorted(events, key=when):
        obj = e.get("involvedObject") or {}
        lines.append("\t".join([when(e) or "-", str(e.get("type", "")), str(e.get("reason", "")),
                                f"{obj.get('kind', '')}/{obj.get('name', '')}", str(e.get("count") or 1),
                                str(e.get("message", "")).strip()]))
    return "LAST SEEN\tTYPE\tREASON\tOBJECT\tCOUNT\tMESSAGE\n" + "".join(f"{line}\n" for line in lines)


def debug_records(client: KubeClient, handle: KubernetesHandle) -> list[DebugRecord]:
    """The step's workload object (``workload.json``), its pods (``pods.json``), each pod's log
    (``pods/<pod>.log``) and the events of the workload and its pods (``events.txt``); what the cluster no longer
    has, or refuses, is a record with ``missing``."""
    out: list[DebugRecord] = []
    where = f"namespace {handle.namespace}"
    if handle.kind and handle.name:
        def workload() -> str:
            obj = client.get_object(str(handle.kind), str(handle.name), handle.namespace)
            if obj is None:
                raise MlrecipeError(f"{handle.kind}/{handle.name} is no longer in {where} (uninstalled?)")
            return _json(_without_managed_fields(obj))

        out.append(_asked("workload.json", f"reading {handle.kind}/{handle.name}", workload))
    try:
        pods = client.list_pods(handle.namespace, handle.selector)
    except Exception as exc:
        return [*out, DebugRecord("pods.json", missing=f"listing the pods ({handle.selector}): {exc}")]
    if not pods:
        return [*out, DebugRecord("pods.json", missing=f"no pod matches {handle.selector} in {where} any more (the "
                                  "step was uninstalled, or its operator removed them: cleanPodPolicy)")]
    out.append(DebugRecord("pods.json", _json([_without_managed_fields(p) for p in pods])))
    events: list[dict[str, Any]] = []
    involved = [str(handle.name)] if handle.name else []
    for pod in pods:
        name = str(pod["metadata"]["name"])
        involved.append(name)
        log = _asked(f"pods/{name}.log", f"reading the log of pod {name}",
                     partial(client.pod_log, name, handle.namespace))
        if log.text == "":
            rank = status.pod_rank(pod)
            log = DebugRecord(log.name, missing=f"pod {name} (rank {rank}) has no log: it did not start, or its "
                              f"container is gone ({status.pod_state(pod)})")
        out.append(log)
    problems = []
    for name in involved:
        try:
            events += client.list_events(handle.namespace, name)
        except Exception as exc:
            problems.append(f"events of {name}: {exc}")
    if events or not problems:
        out.append(DebugRecord("events.txt", events_table(events)))
    if problems:
        out.append(DebugRecord("events-not-read.txt", missing="; ".join(problems)))
    return out
