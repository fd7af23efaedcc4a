"""Reading the end of log files."""

from __future__ import annotations

import os
import re
from pathlib import Path

LOG_TAIL_LINES = 20
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
_ERROR_WORDS = re.compile(r"Error\b|Exception\b|\berror\b|ERROR")


def last_error(path: Path, limit: int = 300) -> str | None:
    """The last line of the end of the log at ``path`` that reports an error or exception (``None`` when none)."""
    for line in reversed(tail(path, 200)):
        text = _COLOURS.sub("", line).strip()
        if _ERROR_WORDS.search(text) and not text.startswith("Traceback"):
            return text if len(text) <= limit else text[:limit - 3] + "..."
    return None


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
