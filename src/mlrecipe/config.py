"""User configuration (``$MLRECIPE_HOME/config.yaml``) and where releases keep their state."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from mlrecipe.backends.slurm.config import SlurmConfig
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.recipe import Model


def mlrecipe_home() -> Path:
    """``$MLRECIPE_HOME``, else ``~/.mlrecipe``."""
    return Path(os.environ.get("MLRECIPE_HOME") or Path.home() / ".mlrecipe").expanduser()


class LocalConfig(Model):
    """Settings of the local backend."""

    root: str | None = Field(None, description="Directory holding the local volumes (default $MLRECIPE_HOME/volumes)")
    volumes: Literal["bind", "none"] = Field(
        "bind", description="bind: mount the recipe's pvc paths (/efs, /fsx) from `root` in a private namespace"
    )
    images: dict[str, str] = Field(
        default_factory=dict, description="image name -> Python environment (venv prefix) that runs its steps"
    )
    stop_grace_seconds: float = Field(10.0, ge=0)

    def volume_root(self) -> Path:
        return Path(self.root).expanduser() if self.root else mlrecipe_home() / "volumes"


class Config(Model):
    local: LocalConfig = Field(default_factory=LocalConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    kubernetes: dict = Field(default_factory=dict)


def load_config() -> Config:
    """Read the config file if it exists; invalid content raises :class:`SpecError`."""
    path = mlrecipe_home() / "config.yaml"
    if not path.exists():
        return Config()
    from pydantic import ValidationError

    from mlrecipe.spec.issues import ValueSources, pydantic_issues
    from mlrecipe.spec.yamlfile import load_yaml

    doc = load_yaml(path)
    data = doc.data or {}
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise SpecError(pydantic_issues(exc, data, ValueSources([(doc, (), "")]))) from None


def release_dir(backend: str, namespace: str, release: str) -> Path:
    """Directory of one release's state record and logs."""
    return mlrecipe_home() / "releases" / backend / namespace / release
