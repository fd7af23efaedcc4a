"""Golden files of materialized local plans (``mlrecipe template`` / ``run --dry-run``).

Refresh with ``pytest tests/unit/test_golden_local_plans.py --update-golden`` and review the diff.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mlrecipe.backends.host.images import SERVING_IMAGES
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.conftest import EXAMPLES, REPO

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "local"

CASES = {
    "quickstart": {"kind": "pipeline", "path": str(EXAMPLES / "quickstart" / "pipeline.yaml"), "sets": []},
    "reference-style-ddp": {
        "kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
        "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml")], "sets": [], "namespace": "default",
    },
    "rayserve-vllm": {
        "kind": "install", "release": "llm", "chart": "serving/rayserve",
        "files": [str(EXAMPLES / "eks" / "serving" / "rayserve-vllm.yaml")], "sets": [], "namespace": "default",
    },
}


def normalize(text: str, home: Path) -> str:
    replacements = [
        (os.environ.get("PATH", ""), "$PATH"),
        (str(home), "$MLRECIPE_HOME"),
        (str(Path(sys.executable).parent), "$PYTHON_BIN"),
        (str(REPO), "$REPO"),
    ]
    for old, new in replacements:
        if old:
            text = text.replace(old, new)
    return text


@pytest.mark.parametrize("name", sorted(CASES))
def test_local_plan_golden(name: str, mlhome: Path, update_golden: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mlrecipe.backends.local.backend.gpu_count", lambda: 0)
    monkeypatch.setattr("mlrecipe.backends.local.backend.known_images",
                        lambda: dict.fromkeys(SERVING_IMAGES, REPO / ".venv-vllm"))
    monkeypatch.delenv("MLRECIPE_IMAGES", raising=False)
    spec = spec_from_inputs(CASES[name])
    runner = ReleaseRunner(spec, get_backend("local", {"master_port": 29500}), CASES[name], QuietDisplay())
    text = normalize(runner.materialize(), mlhome)
    path = GOLDEN / f"{name}.txt"
    if update_golden or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"plan changed; refresh with --update-golden and review {path}"
    assert not (mlhome / "releases").exists(), "materializing a plan writes nothing"
