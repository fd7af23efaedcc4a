"""The CPUs of this machine, shared by the steps one local backend runs at the same time (the parallel
branches of a release).

A step needs one CPU per rank (``nnodes x nproc_per_node``). It starts when its ranks and those of the
running steps fit the CPUs, or when no other step runs (a step larger than the machine still runs, alone:
the local backend oversubscribes up to ``max_ranks`` rather than refuse). A server does not count: it runs
until ``uninstall``, and the steps that use it must be able to start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class CpuSlots:
    """Who holds how many of ``capacity`` CPUs: running step -> its ranks."""

    capacity: int
    holders: dict[str, int] = field(default_factory=dict)

    @property
    def used(self) -> int:
        return sum(self.holders.values())

    def take(self, holder: str, ranks: int) -> bool:
        """Hold ``ranks`` CPUs for ``holder`` when they fit, or when nothing else is held; whether it holds them."""
        if holder in self.holders:
            return True
        if self.holders and self.used + ranks > self.capacity:
            return False
        self.holders[holder] = ranks
        return True

    def release(self, holder: str) -> None:
        """Give ``holder``'s CPUs back (idempotent)."""
        self.holders.pop(holder, None)

    def waiting_note(self, ranks: int, waited: float) -> str:
        """Why a step of ``ranks`` ranks waits, for the display."""
        return (f"waiting {waited:.0f} s for CPUs: its {ranks} rank(s) and the {self.used} of the running steps do "
                f"not fit this machine's {self.capacity} CPU(s) (--backend-opt cpus=N raises the bound)")
