"""One device grant: the GPUs (the machine-wide lease, :mod:`.gpu_lease`) and the CPU slots (:mod:`.cpus`) that the
nodes of one group get before they start.

Whatever runs nodes on this machine asks for its devices the same way: the local backend's steps, a SageMaker-local
training job's supervisor and an endpoint's model server. A :class:`DeviceGrant` names what it asks for (every GPU of
a list, or any one of them; CPU slots for its ranks); :meth:`DeviceGrant.take` holds all of it, or none and says why
(:class:`GrantWait`: the busy GPUs and their holders, or CPUs that do not fit beside the running steps'). The
:class:`~.nodes.NodeGroup` that starts the nodes hands the lease's files to every node and then lets go of this
process's hold (:meth:`DeviceGrant.handed_over`), so the lease lasts until the last node ends, however it ends; it
gives the CPU slots back when it is closed (:meth:`DeviceGrant.give_back`). Each caller decides what a wait means: the
local backend waits with a progress note or refuses (``gpu_busy``), a job waits with a status message, an endpoint
fails at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlrecipe.backends.host.cpus import CpuSlots
from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.gpu_lease import GpuLease, Holder, busy_message


@dataclass(frozen=True)
class GrantWait:
    """Why a grant is not held: GPUs that others hold (``busy``, with their holders), else CPUs that do not fit
    (``cpus``, asked for ``ranks``)."""

    busy: tuple[tuple[Gpu, Holder | None], ...] = ()
    cpus: CpuSlots | None = None
    ranks: int = 0

    def holders(self) -> str:
        """``GPU 0 (...) held by release r step s (pid 12, for 30 s)``, for every busy GPU."""
        return busy_message(list(self.busy))

    def note(self, waited: float) -> str:
        """What a step that waited ``waited`` seconds so far waits for, for the progress display."""
        if self.busy or self.cpus is None:
            return f"waiting {waited:.0f} s for its GPUs: {self.holders()}"
        return self.cpus.waiting_note(self.ranks, waited)


@dataclass
class DeviceGrant:
    """The devices one node group asks for: ``gpus`` (all of them, or with ``any_one_gpu`` the first of them that is
    free), leased in ``lease_dir`` in the name of ``release`` and ``step``; ``ranks`` CPUs of ``cpus`` held as
    ``cpu_holder``. A grant that asks for nothing is held at once."""

    lease_dir: Path
    release: str
    step: str
    gpus: tuple[Gpu, ...] = ()
    any_one_gpu: bool = False
    cpus: CpuSlots | None = None
    ranks: int = 0
    cpu_holder: str = ""
    _lease: GpuLease | None = field(default=None, init=False, repr=False)
    _handed_over: bool = field(default=False, init=False, repr=False)

    @property
    def granted_gpus(self) -> tuple[Gpu, ...]:
        """The GPUs held for the nodes (with ``any_one_gpu``, the one chosen); empty before :meth:`take`."""
        return self._lease.gpus if self._lease is not None else ()

    @property
    def fds(self) -> list[int]:
        """The lease's lock files, for every node (``Popen(pass_fds=...)``); empty once handed over."""
        return self._lease.fds if self._lease is not None else []

    def take(self) -> GrantWait | None:
        """Hold the GPUs, then the CPU slots: None once both are held (again: still held), else why not. The GPUs of
        a grant that waits for CPUs stay held; a grant handed over to its nodes is not taken again."""
        if self._handed_over:
            return None
        if self.gpus and self._lease is None:
            busy = self._lease_gpus()
            if busy:
                return GrantWait(busy=tuple(busy))
        if self.cpus is not None and not self.cpus.take(self.cpu_holder, self.ranks):
            return GrantWait(cpus=self.cpus, ranks=self.ranks)
        return None

    def _lease_gpus(self) -> list[tuple[Gpu, Holder | None]]:
        choices = [(gpu,) for gpu in self.gpus] if self.any_one_gpu else [self.gpus]
        busy: list[tuple[Gpu, Holder | None]] = []
        for gpus in choices:
            lease = GpuLease(self.lease_dir, gpus, self.release, self.step)
            held = lease.acquire()
            if not held:
                self._lease = lease
                return []
            busy.extend(held)
        return busy

    def handed_over(self) -> None:
        """The nodes hold the lease now (its files were passed to each): this process lets go of its own hold."""
        self._handed_over = True
        if self._lease is not None:
            self._lease.close()

    def give_back(self) -> None:
        """Give everything back: the CPU slots, and this process's hold on the lease (nodes keep theirs until they
        end). Idempotent."""
        if self.cpus is not None:
            self.cpus.release(self.cpu_holder)
        if self._lease is not None:
            self._lease.close()
