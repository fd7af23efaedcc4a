"""Kubernetes: the recipe's network_check reaches every pod's step program (step.json in the runtime's ConfigMap)
as a map, as the charts render it; golden: the step.json of the reference-style DDP recipe with a min_ratio set.

Refresh with ``pytest tests/kubernetes/test_fabric_check_plan.py --update-golden`` and review the diff."""

from __future__ import annotations

import json
from pathlib import Path

from mlrecipe.runtime.step_runtime import FabricSettings
from tests.golden import check_golden
from tests.kubernetes.step_programs import reference_step_programs
from tests.repo import REPO

GOLDEN = REPO / "tests" / "golden" / "kubernetes" / "fabric-check-step-json.json"


def test_step_json_carries_the_network_check(mlhome: Path, tmp_path: Path, update_golden: bool) -> None:
    assert all("network_check" not in p for p in reference_step_programs([])), "no key: step.json as before"
    plain = reference_step_programs(["network_check=true"])
    assert [FabricSettings.from_program(p) for p in plain] == [FabricSettings(None, "g6.2xlarge", False)]
    overlay = tmp_path / "check.yaml"
    overlay.write_text("network_check: {min_ratio: 0.5, node_type: p4d.24xlarge}\n")
    programs = reference_step_programs([], (overlay,))
    assert [FabricSettings.from_program(p) for p in programs] == [FabricSettings(0.5, "p4d.24xlarge", False)]
    check_golden(GOLDEN, json.dumps(programs, indent=2, sort_keys=True) + "\n", update_golden)
