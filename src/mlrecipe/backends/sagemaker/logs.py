"""A training job's logs: each host's CloudWatch log stream (``<job>/algo-<N>-<time>``) fetched into a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrecipe.backends.sagemaker.client import call


def host_name(rank: int) -> str:
    """SageMaker's name of node ``rank``: algo-1, algo-2, ..."""
    return f"algo-{rank + 1}"


def fetch_stream(logs: Any, group: str, job_name: str, rank: int, dest: Path) -> Path:
    """Write the CloudWatch log of host ``rank`` of ``job_name`` to ``dest`` (replacing it); ``dest``."""
    prefix = f"{job_name}/{host_name(rank)}-"
    found = call("DescribeLogStreams", logs.describe_log_streams, logGroupName=group, logStreamNamePrefix=prefix)
    streams = sorted(s["logStreamName"] for s in found.get("logStreams", []))
    lines: list[str] = []
    for stream in streams:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
            if token:
                kwargs["nextToken"] = token
            page = call("GetLogEvents", logs.get_log_events, **kwargs)
            lines += [str(e.get("message", "")).rstrip("\n") for e in page.get("events", [])]
            nxt = page.get("nextForwardToken")
            if not page.get("events") or nxt == token:
                break
            token = nxt
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    tmp.replace(dest)
    return dest
