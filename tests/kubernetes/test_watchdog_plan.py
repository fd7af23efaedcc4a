"""Kubernetes: the recipe's watchdog block reaches every pod's step program (step.json in the runtime's ConfigMap),
as the charts render it; golden: the step.json of the reference-style DDP recipe with a watchdog set.

Refresh with ``pytest tests/kubernetes/test_watchdog_plan.py --update-golden`` and review the diff."""

from __future__ import annotations

import json
from pathlib import Path

from mlrecipe.backends.kubernetes.plan import KubernetesPlan
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from mlrecipe.runtime.step_runtime import WatchdogSettings
from tests.golden import check_golden
from tests.repo import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "kubernetes" / "watchdog-step-json.json"


def _step_programs(sets: list[str]) -> list[dict]:
    inputs = {"kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
              "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml")], "sets": sets,
              "namespace": "default"}
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes"), inputs, QuietDisplay())
    programs = []
    for step in runner.spec.steps:
        plan = runner.backend.plan(step, runner.context)
        assert isinstance(plan, KubernetesPlan)
        programs += [json.loads(o["data"]["step.json"]) for o in plan.objects
                     if o["kind"] == "ConfigMap" and "step.json" in o.get("data", {})]
    assert programs, "the chart renders the runtime's ConfigMap"
    return programs


def test_step_json_carries_the_watchdog(mlhome: Path, update_golden: bool) -> None:
    assert all("watchdog" not in p for p in _step_programs([])), "no block: step.json as before"
    programs = _step_programs(["watchdog.hang_timeout=10m", "watchdog.on_hang=restart"])
    assert [WatchdogSettings.from_program(p) for p in programs] == [WatchdogSettings(600.0, "restart", 1)]
    check_golden(GOLDEN, json.dumps(programs, indent=2, sort_keys=True) + "\n", update_golden)
