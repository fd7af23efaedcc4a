"""Kubernetes: the recipe's watchdog block reaches every pod's step program (step.json in the runtime's ConfigMap),
as the charts render it; golden: the step.json of the reference-style DDP recipe with a watchdog set.

Refresh with ``pytest tests/kubernetes/test_watchdog_plan.py --update-golden`` and review the diff."""

from __future__ import annotations

import json
from pathlib import Path

from mlrecipe.runtime.step_runtime import WatchdogSettings
from tests.golden import check_golden
from tests.kubernetes.step_programs import reference_step_programs
from tests.repo import REPO

GOLDEN = REPO / "tests" / "golden" / "kubernetes" / "watchdog-step-json.json"


def test_step_json_carries_the_watchdog(mlhome: Path, update_golden: bool) -> None:
    assert all("watchdog" not in p for p in reference_step_programs([])), "no block: step.json as before"
    programs = reference_step_programs(["watchdog.hang_timeout=10m", "watchdog.on_hang=restart"])
    assert [WatchdogSettings.from_program(p) for p in programs] == [WatchdogSettings(600.0, "restart", 1)]
    check_golden(GOLDEN, json.dumps(programs, indent=2, sort_keys=True) + "\n", update_golden)
