"""Options of the local backend: the ``local:`` section of the config file, or ``--backend-opt key=value``.

Example::

    local:
      root: /data/mlrecipe-volumes      # where the pvc volumes (/fsx, /efs) live on this machine
      images: {vllm/vllm-openai:latest: /opt/venvs/vllm}
      stop_grace_seconds: 10
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from mlrecipe.backends.base import BackendOptions
from mlrecipe.config import default_volume_root

RANKS_PER_CPU = 8


class LocalOptions(BackendOptions):
    """Settings of the local backend (each node of a step is a process group on this machine)."""

    root: str | None = Field(
        None, description="Directory holding the pvc volumes, one sub-directory per pvc name "
        "(default $MLRECIPE_HOME/volumes)")
    volumes: Literal["bind", "none"] = Field(
        "bind", description="bind: mount the recipe's pvc paths (/efs, /fsx) from `root` in a private mount "
        "namespace; none: run without mounts (the paths must exist)")
    images: dict[str, str] = Field(
        default_factory=dict, description="Image name -> Python environment (venv prefix) that runs its steps; "
        "$MLRECIPE_IMAGES (image=prefix,...) wins")
    stop_grace_seconds: float = Field(
        10.0, ge=0, description="Seconds between SIGTERM and SIGKILL when a step is stopped")
    master_port: int | None = Field(
        None, ge=1, le=65535, description="PET_MASTER_PORT of every step (default: a free port per step)")
    server_port: int | None = Field(
        None, ge=1, le=65535, description="Port of serving steps (default: a free port; a port pinned in the "
        "recipe's probes wins)")
    max_ranks: int | None = Field(
        None, ge=1, description=f"Most ranks (nnodes x nproc_per_node) one step may start here (default "
        f"{RANKS_PER_CPU} per CPU); a step asking for more is refused before it starts")

    def volume_root(self) -> Path:
        return Path(self.root).expanduser() if self.root else default_volume_root()

    def rank_limit(self) -> int:
        return self.max_ranks or RANKS_PER_CPU * (os.cpu_count() or 1)
