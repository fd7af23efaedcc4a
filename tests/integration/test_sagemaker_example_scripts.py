"""The SageMaker hybrid example's scripts on their own: one preprocessing function for training and serving (a
test that fails on skew), DDP training to >= 0.90 held-out accuracy with identical weights on both ranks, and the
packed inference handler answering like the trained model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.repo import EXAMPLES

pytestmark = pytest.mark.integration

SCRIPTS = EXAMPLES / "sagemaker-hybrid" / "scripts"
BIN = Path(sys.executable).parent

SKEW_CHECK = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import inference, preprocess, train
from sklearn.datasets import load_digits
assert train.to_model_input is preprocess.to_model_input, "training has its own preprocessing"
assert inference.to_model_input is preprocess.to_model_input, "serving has its own preprocessing"
images = load_digits().images[:16]
served = inference.input_fn(json.dumps({"instances": images.tolist()}), "application/json")
trained = preprocess.to_model_input(images.astype(np.uint8))
assert served.shape == (16, 3, 32, 32), served.shape
assert (served - trained).abs().max().item() == 0.0, "serving sees other inputs than training"
print("no skew")
"""


def test_training_and_serving_share_one_preprocessing() -> None:
    result = subprocess.run([sys.executable, "-c", SKEW_CHECK, str(SCRIPTS)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "no skew" in result.stdout, result.stderr


@pytest.mark.slow
def test_ddp_training_then_the_packed_handler(tmp_path: Path) -> None:
    data, model = tmp_path / "data", tmp_path / "model"
    subprocess.run([sys.executable, SCRIPTS / "prepare_data.py", "--out", data], check=True, timeout=120)
    run = subprocess.run(
        [BIN / "torchrun", "--standalone", "--nproc_per_node", "2", SCRIPTS / "train.py", "--data-dir", data,
         "--model-dir", model, "--epochs", "6"],
        capture_output=True, text=True, timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": f"{BIN}:/usr/bin:/bin"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    accuracy = float(run.stdout.split("final held-out accuracy ")[1].split()[0])
    assert accuracy >= 0.90, run.stdout
    digests = json.loads((model / "weights.sha256.json").read_text())
    assert len(digests) == 2 and len(set(digests)) == 1
    assert sorted(p.name for p in (model / "code").iterdir()) == ["inference.py", "model.py", "preprocess.py"]
    served = subprocess.run([sys.executable, "-c", SERVE_CHECK, str(model), str(data)], capture_output=True,
                            text=True, timeout=120)
    assert served.returncode == 0, served.stderr
    assert float(served.stdout.split()[-1]) == pytest.approx(accuracy, abs=1e-4)


SERVE_CHECK = """
import json, sys
import numpy as np
model_dir, data_dir = sys.argv[1], sys.argv[2]
sys.path.insert(0, model_dir + "/code")
import inference
model = inference.model_fn(model_dir)
with np.load(data_dir + "/test.npz") as data:
    images, labels = data["images"], data["labels"]
answer = inference.output_fn(inference.predict_fn(
    inference.input_fn(json.dumps({"instances": images.tolist()}), "application/json"), model), "application/json")
predicted = np.array(json.loads(answer)["predictions"])
print("accuracy", float((predicted == labels).mean()))
"""
