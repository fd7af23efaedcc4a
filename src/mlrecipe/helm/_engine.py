"""Shared access to helm_python: lazy import, cached chart loading, quiet symlink notices."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import yaml

#: helm_python calls are serialized: loading and rendering share native state.
LOCK = threading.RLock()

#: The fastest available YAML loader (libyaml when present).
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_NOISE = "found symbolic link in path"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Drop Helm's INFO notices about followed symlinks (written by Go straight to fd 2)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            kept = [ln for ln in sink.read().decode(errors="replace").splitlines() if _NOISE not in ln]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")


@functools.lru_cache(maxsize=128)
def load_chart(chart_dir: str) -> Any:
    """Load (once per process) the chart at the absolute path ``chart_dir``."""
    import helm_python

    with LOCK, _quiet_stderr():
        return helm_python.Chart.load(chart_dir)


def parse_yaml(text: str) -> Any:
    """Parse one YAML document."""
    return yaml.load(text, Loader=YAML_LOADER)  # a safe loader
