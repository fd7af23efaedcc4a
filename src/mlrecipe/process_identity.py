"""A process, not just a pid: ``[pid, start ticks]`` (its start time in clock ticks since boot, from
``/proc/<pid>/stat``), so that a pid the kernel gave to another process is never taken for it.

The one process identity of mlrecipe: the host layer's nodes (:mod:`mlrecipe.backends.host.nodes`, which exports
these functions), a SageMaker-local job's supervisor, and the CLI process that drives a release (its state record's
``driver_pid`` and ``driver_started``). Records written by versions that kept psutil's ``create_time`` (epoch
seconds) are read through :func:`ticks_from_epoch`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first), or None when the process is
    gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it is gone (a zombie counts as gone)."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def identity(pid: int) -> list[int]:
    """``[pid, start ticks]``: a process, not just a pid."""
    return [pid, start_time(pid) or 0]


def alive(ident: Sequence[int] | None) -> bool:
    """True while the process ``[pid, start time]`` still runs (an exited one its parent has not reaped, a zombie,
    does not)."""
    return ident is not None and len(ident) == 2 and start_time(ident[0]) == ident[1]


def boot_time() -> float:
    """When this machine booted, in epoch seconds (``btime`` of ``/proc/stat``, which psutil's times count from)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("/proc/stat has no btime line")


def ticks_from_epoch(created: float) -> int:
    """A start time kept as epoch seconds (psutil's ``create_time``, in records of earlier versions) in clock ticks
    since boot, as :func:`start_time` gives it."""
    return round((created - boot_time()) * os.sysconf("SC_CLK_TCK"))
