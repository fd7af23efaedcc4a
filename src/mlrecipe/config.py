"""Where mlrecipe keeps its files: ``$MLRECIPE_HOME``, its config file and each release's state directory.

The config file (``$MLRECIPE_HOME/config.yaml``) has one section per backend (``local:``, ``slurm:``,
``kubernetes:``); each backend validates its own section with its options model
(:mod:`mlrecipe.backends.options`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlrecipe.spec.yamlfile import YamlDoc

CONFIG_FILE = "config.yaml"


def mlrecipe_home() -> Path:
    """``$MLRECIPE_HOME``, else ``~/.mlrecipe``."""
    return Path(os.environ.get("MLRECIPE_HOME") or Path.home() / ".mlrecipe").expanduser()


def config_path() -> Path:
    """The user's config file (it may not exist)."""
    return mlrecipe_home() / CONFIG_FILE


def read_config() -> YamlDoc | None:
    """The parsed config file, or ``None`` when there is none; bad YAML raises ``SpecError``."""
    from mlrecipe.spec.yamlfile import load_yaml

    path = config_path()
    return load_yaml(path) if path.exists() else None


def default_volume_root() -> Path:
    """Where pvc volumes live on this machine unless configured: ``$MLRECIPE_HOME/volumes``."""
    return mlrecipe_home() / "volumes"


def release_dir(backend: str, namespace: str, release: str) -> Path:
    """Directory of one release's state record and logs."""
    return mlrecipe_home() / "releases" / backend / namespace / release
