"""CPU placement of a server (mlrecipe.serve.placement): the plan, and what it does to real threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mlrecipe.serve.cli import engine_ranks
from mlrecipe.serve.placement import FRONT_CPUS_VAR, SWITCH_VAR, CpuPlacement, cpu_list, parse_cpu_list

USABLE = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(USABLE) < 2, reason="placement needs 2 usable CPUs (CI has 2)")


@pytest.mark.parametrize(("usable", "engine", "front"), [
    ({0, 1}, {0}, {1}),
    ({0, 1, 2, 3}, {0, 1, 2}, {3}),
    ({4, 9, 2}, {2, 4}, {9}),
])
def test_engine_gets_all_cpus_but_the_last(usable: set[int], engine: set[int], front: set[int]) -> None:
    placement = CpuPlacement.plan(usable, env={})
    assert placement == CpuPlacement(frozenset(engine), frozenset(front))


@pytest.mark.parametrize(("usable", "env"), [
    ({3}, {}),
    ({0, 1}, {SWITCH_VAR: "off"}),
    ({0, 1}, {SWITCH_VAR: "0"}),
])
def test_no_placement_on_one_cpu_or_when_switched_off(usable: set[int], env: dict[str, str]) -> None:
    assert CpuPlacement.plan(usable, env=env) is None


def test_cpu_lists_round_trip() -> None:
    assert parse_cpu_list("0,2-4, 7") == {0, 2, 3, 4, 7}
    assert cpu_list({7, 0, 3}) == "0,3,7"
    assert parse_cpu_list(cpu_list({5, 1})) == {1, 5}


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.integration
@needs_two_cpus
def test_engine_side_pins_the_process_and_binds_vllm() -> None:
    out = run_python("""
        import json, os
        from mlrecipe.serve.placement import CpuPlacement
        env = {}
        placement = CpuPlacement.plan()
        placement.start_vllm_engine_here(env)
        print(json.dumps({"env": env, "mask": sorted(os.sched_getaffinity(0))}))
    """)
    engine, front = USABLE[:-1], USABLE[-1:]
    assert json.loads(out) == {"env": {"VLLM_CPU_OMP_THREADS_BIND": cpu_list(engine), FRONT_CPUS_VAR: cpu_list(front)},
                               "mask": engine}


@pytest.mark.integration
@needs_two_cpus
def test_front_threads_move_to_the_front_cpus_and_the_setting_is_consumed() -> None:
    out = run_python(f"""
        import os, threading
        from mlrecipe.serve.placement import move_front_threads
        os.sched_setaffinity(0, {{{USABLE[0]}}})
        started, done = threading.Event(), threading.Event()
        def idle():
            started.set()
            done.wait()
        thread = threading.Thread(target=idle)
        thread.start()
        started.wait()
        env = {{"{FRONT_CPUS_VAR}": "{USABLE[-1]}"}}
        moved = move_front_threads(env)
        masks = {{tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")}}
        done.set()
        thread.join()
        print(sorted(moved), sorted(masks), env, move_front_threads(env))
    """)
    assert out == f"[{USABLE[-1]}] [({USABLE[-1]},)] {{}} None"


@pytest.mark.parametrize(("extra", "ranks"), [
    ([], 1),
    (["--max-model-len", "128"], 1),
    (["--tensor-parallel-size", "2"], 2),
    (["-tp=2", "--pipeline-parallel-size=2"], 4),
])
def test_placement_only_for_a_single_engine_rank(extra: list[str], ranks: int) -> None:
    """vLLM's OpenMP binding takes one CPU list per rank: several ranks are left to vLLM's own placement."""
    assert engine_ranks(extra) == ranks
