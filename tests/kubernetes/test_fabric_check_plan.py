"""Kubernetes: the recipe's network_check reaches every pod's step program (step.json in the runtime's ConfigMap)
as a map, as the charts render it; golden: the step.json of the reference-style DDP recipe with a min_ratio set.

Refresh with ``pytest tests/kubernetes/test_fabric_check_plan.py --update-golden`` and review the diff."""

from __future__ import annotations

import json
from pathlib import Path

from mlrecipe.backends.kubernetes.plan import KubernetesPlan
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from mlrecipe.runtime.step_runtime import FabricSettings
from tests.golden import check_golden
from tests.repo import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "kubernetes" / "fabric-check-step-json.json"


def _step_programs(sets: list[str], extra: tuple[Path, ...] = ()) -> list[dict]:
    inputs = {"kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
              "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml"), *map(str, extra)], "sets": sets,
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


def test_step_json_carries_the_network_check(mlhome: Path, tmp_path: Path, update_golden: bool) -> None:
    assert all("network_check" not in p for p in _step_programs([])), "no key: step.json as before"
    plain = _step_programs(["network_check=true"])
    assert [FabricSettings.from_program(p) for p in plain] == [FabricSettings(None, "g6.2xlarge", False)]
    overlay = tmp_path / "check.yaml"
    overlay.write_text("network_check: {min_ratio: 0.5, node_type: p4d.24xlarge}\n")
    programs = _step_programs([], (overlay,))
    assert [FabricSettings.from_program(p) for p in programs] == [FabricSettings(0.5, "p4d.24xlarge", False)]
    check_golden(GOLDEN, json.dumps(programs, indent=2, sort_keys=True) + "\n", update_golden)
