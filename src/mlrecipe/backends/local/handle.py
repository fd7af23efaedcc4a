"""The handle of a local step: the run id its processes carry in their environment and the node leaders."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mlrecipe.backends.base import StepHandle


class NodeProcess(BaseModel):
    """The leader process of one node (its process group holds the node's processes)."""

    rank: int
    pid: int
    created: float | None = Field(None, description="The process's start time, to tell a reused pid apart")


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
