"""Where a server's threads run on a CPU machine: the engine on its own cores, the HTTP front on the last one.

On a few cores vLLM's API server, its engine-core process and its worker otherwise share every core, and
under load the API server falls behind the engine: on the 2-core test machine the engine sees small batches
and concurrency 32 loses a third of its throughput (``benchmarks/bench_serving.py``). ``mlrecipe.serve``
therefore starts the engine on every usable CPU but the last (vLLM's OpenMP threads bound there through
``VLLM_CPU_OMP_THREADS_BIND``, its processes inheriting the mask) and, once the engine is up, moves the
front's threads to the last CPU. The transformers engine is placed the same way: its generation thread on
the engine CPUs, the event loop on the front CPU.

No placement when fewer than two CPUs are usable, with ``--no-cpu-placement`` or
``MLRECIPE_SERVE_CPU_PLACEMENT=off``, and for vLLM on a GPU, with several engine ranks (tensor / pipeline / data
parallel) or a ``VLLM_CPU_OMP_THREADS_BIND`` of the user's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass

SWITCH_VAR = "MLRECIPE_SERVE_CPU_PLACEMENT"
FRONT_CPUS_VAR = "MLRECIPE_SERVE_FRONT_CPUS"
VLLM_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"


def cpu_list(cpus: Iterable[int]) -> str:
    """``{0, 1, 3}`` as ``"0,1,3"`` (the form of ``VLLM_CPU_OMP_THREADS_BIND`` and ``taskset -c``)."""
    return ",".join(str(c) for c in sorted(cpus))


def parse_cpu_list(text: str) -> frozenset[int]:
    """``"0,2-4"`` as ``{0, 2, 3, 4}``."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


@dataclass(frozen=True)
class CpuPlacement:
    """The CPUs of the engine's compute and of the front (HTTP, tokenization, scheduling of responses)."""

    engine: frozenset[int]
    front: frozenset[int]

    @classmethod
    def plan(cls, usable: Iterable[int] | None = None, env: Mapping[str, str] = os.environ) -> CpuPlacement | None:
        """The placement for these CPUs (default: this process's affinity), or None where none applies."""
        if env.get(SWITCH_VAR, "auto").lower() in ("off", "0", "false", "no"):
            return None
        cpus = sorted(os.sched_getaffinity(0) if usable is None else usable)
        if len(cpus) < 2:
            return None
        return cls(engine=frozenset(cpus[:-1]), front=frozenset(cpus[-1:]))

    def start_vllm_engine_here(self, env: MutableMapping[str, str]) -> None:
        """Before exec'ing vLLM: this process (hence the engine processes it spawns) on the engine CPUs, vLLM's
        OpenMP threads bound to them, and the front CPUs left in ``env`` for :func:`move_front_threads`."""
        env[VLLM_BIND_VAR] = cpu_list(self.engine)
        env[FRONT_CPUS_VAR] = cpu_list(self.front)
        os.sched_setaffinity(0, self.engine)

    def pin_this_thread_to_engine(self) -> None:
        os.sched_setaffinity(0, self.engine)

    def pin_this_thread_to_front(self) -> None:
        os.sched_setaffinity(0, self.front)


def move_front_threads(env: MutableMapping[str, str] | None = None) -> frozenset[int] | None:
    """In vLLM's API server once its engine runs: every thread of this process to the CPUs that
    :meth:`CpuPlacement.start_vllm_engine_here` left in the environment (consumed); None when there are none."""
    if env is None:
        env = os.environ
    text = env.pop(FRONT_CPUS_VAR, None)
    if not text:
        return None
    front = parse_cpu_list(text)
    pin_all_threads(front)
    return front


def pin_all_threads(cpus: Iterable[int], pid: int | str = "self") -> None:
    """Every current thread of process ``pid`` (default: this one) onto ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            continue
