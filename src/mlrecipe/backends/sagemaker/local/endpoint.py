"""A local endpoint's typed record and its store (``endpoints/<name>/endpoint.json``, the same keys as its fields;
the status is SageMaker's word for it)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe.backends.sagemaker.local.store import Store, TypedStore


class EndpointStatus(str, enum.Enum):
    """``EndpointStatus`` (local mode has no updates: Creating, then InService or Failed)."""

    CREATING = "Creating"
    IN_SERVICE = "InService"
    FAILED = "Failed"


@dataclass
class EndpointRecord:
    """One local endpoint: its request and production variant, status and times (epoch seconds), the model
    server's port once it listens, and the identities (``[pid, start ticks]``) of its server and of the process
    that created it."""

    request: dict[str, Any]
    arn: str
    variant: dict[str, Any]
    created: float
    modified: float
    status: EndpointStatus = EndpointStatus.CREATING
    failure_reason: str | None = None
    port: int | None = None
    server: list[int] | None = None
    creator: list[int] | None = None

    @property
    def name(self) -> str:
        return str(self.request["EndpointName"])

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "status": self.status.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndpointRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known}, "status": EndpointStatus(data["status"])})


class EndpointStore(TypedStore[EndpointRecord]):
    """The endpoints under a root, as typed records."""

    def __init__(self, root: Path) -> None:
        super().__init__(Store(root, "endpoint", nested=True), EndpointRecord)
