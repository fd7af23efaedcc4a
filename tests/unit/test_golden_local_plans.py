"""Golden files of materialized local plans (``mlrecipe template`` / ``run --dry-run``).

Refresh with ``pytest tests/unit/test_golden_local_plans.py --update-golden`` and review the diff (only that
flag writes golden files; a missing one fails).
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
from tests.golden import check_golden, interpreter_replacements
from tests.golden import normalize as replace_all
from tests.repo import EXAMPLES, REPO

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
    return replace_all(text, [
        (os.environ.get("PATH", ""), "$PATH"),
        (str(home), "$MLRECIPE_HOME"),
        *interpreter_replacements(),
        (str(REPO), "$REPO"),
    ])


@pytest.mark.parametrize("name", sorted(CASES))
def test_local_plan_golden(name: str, mlhome: Path, update_golden: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mlrecipe.backends.local.backend.visible_gpus", lambda: [])
    monkeypatch.setattr("mlrecipe.backends.local.backend.known_images",
                        lambda: dict.fromkeys(SERVING_IMAGES, REPO / ".venv-vllm"))
    monkeypatch.delenv("MLRECIPE_IMAGES", raising=False)
    spec = spec_from_inputs(CASES[name])
    runner = ReleaseRunner(spec, get_backend("local", {"master_port": 29500}), CASES[name], QuietDisplay())
    text = normalize(runner.materialize(), mlhome)
    check_golden(GOLDEN / f"{name}.txt", text, update_golden)
    assert not (mlhome / "releases").exists(), "materializing a plan writes nothing"


def test_missing_golden_fails_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "golden" / "missing.txt"
    with pytest.raises(pytest.fail.Exception, match=r"missing\.txt is missing: create it with .*--update-golden"):
        check_golden(path, "text\n", update=False)
    assert not path.exists() and not path.parent.exists()


def test_golden_is_written_only_with_update_and_then_compared(tmp_path: Path) -> None:
    path = tmp_path / "golden" / "plan.txt"
    check_golden(path, "one\ntwo\n", update=True)
    assert path.read_text() == "one\ntwo\n"
    check_golden(path, "one\ntwo\n", update=False)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)plan\.txt differs.*--update-golden.*-two\n\+three"):
        check_golden(path, "one\nthree\n", update=False)
    assert path.read_text() == "one\ntwo\n", "a failed comparison writes nothing"


def test_interpreter_is_normalized_whatever_its_name() -> None:
    exe = sys.executable
    bin_dir = str(Path(exe).parent)
    text = f"{exe} run.py; PATH={bin_dir}:$PATH; {exe}3.99 x; {exe}-config; see {exe}."
    assert replace_all(text, interpreter_replacements()) == (
        f"$PYTHON run.py; PATH=$PYTHON_BIN:$PATH; $PYTHON_BIN/{Path(exe).name}3.99 x; "
        f"$PYTHON_BIN/{Path(exe).name}-config; see $PYTHON."
    )
