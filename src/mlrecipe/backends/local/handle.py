"""The handle of a local step: the run id its processes carry in their environment and the node leaders."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from mlrecipe.backends.base import StepHandle
from mlrecipe.backends.host.nodes import identity
from mlrecipe.process_identity import ticks_from_epoch


class NodeProcess(BaseModel):
    """The leader process of one node (its process group holds the node's processes), known by the host layer's
    identity ``[pid, started]`` (:mod:`mlrecipe.backends.host.nodes`)."""

    rank: int
    pid: int
    started: int | None = Field(None, description="The process's start time in clock ticks since boot, to tell a "
                                "reused pid apart")

    @model_validator(mode="before")
    @classmethod
    def _from_created(cls, data: Any) -> Any:
        """A record written before ``started``: its ``created`` (epoch seconds, psutil's) in clock ticks."""
        if isinstance(data, dict) and data.get("started") is None and isinstance(data.get("created"), int | float):
            data = {**data, "started": ticks_from_epoch(float(data["created"]))}
        return data

    def identity(self) -> list[int]:
        """``[pid, start ticks]``; a record without a start time stands for whatever process has the pid now."""
        return [self.pid, self.started] if self.started is not None else identity(self.pid)


class ServerAddress(BaseModel):
    """Where a serving step listens and its health URL."""

    url: str
    health: str


class LocalHandle(StepHandle):
    """``run_id`` is in every process's environment (``MLRECIPE_RUN_ID``), so that processes that left
    their group are found too."""

    run_id: str
    nodes: list[NodeProcess] = Field(default_factory=list)
    server: ServerAddress | None = None
