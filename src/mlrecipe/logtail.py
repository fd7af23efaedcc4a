"""Reading the end of log files."""

from __future__ import annotations

import os
import re
from pathlib import Path

LOG_TAIL_LINES = 20
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION = re.compile(r"\b[A-Z]\w*(Error|Exception): ")
_ERROR_WORDS = re.compile(r"Error\b|Exception\b|\berror\b|ERROR")


def last_error(path: Path, limit: int = 300) -> str | None:
    """The last exception line (``SomeError: ...``) of the end of the log at ``path``, else its last line that
    reports an error (``None`` when none), without terminal colours, cut to ``limit`` characters."""
    lines = [_COLOURS.sub("", line).strip() for line in reversed(tail(path, 200))]
    found = next((t for t in lines if _EXCEPTION.search(t)), None) \
        or next((t for t in lines if _ERROR_WORDS.search(t) and not t.startswith("Traceback")), None)
    if found is None:
        return None
    return found if len(found) <= limit else found[:limit - 3] + "..."


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
