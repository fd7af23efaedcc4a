"""Reading the end of log files."""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_LINES = 20


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of the file at ``path`` (empty when unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]
