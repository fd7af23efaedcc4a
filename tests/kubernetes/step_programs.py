"""The step programs (``step.json`` of the runtime's ConfigMap) that the Kubernetes backend renders for the
reference-style DDP recipe, with ``--set`` expressions and more recipe files: what the runtime reads in every pod."""

from __future__ import annotations

import json
from pathlib import Path

from mlrecipe.backends.kubernetes.plan import KubernetesPlan
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.repo import EXAMPLES


def reference_step_programs(sets: list[str], extra: tuple[Path, ...] = ()) -> list[dict]:
    """Every ``step.json`` of the plan of ``examples/reference-style/pretrain-ddp.yaml`` (+ ``extra``, ``sets``)."""
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
