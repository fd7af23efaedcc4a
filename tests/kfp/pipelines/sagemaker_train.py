"""The training program of sagemaker.yaml's train step: a 'model' of one weight and its inference handler, written
to $SM_MODEL_DIR (SageMaker's local mode packs it as model.tar.gz, the step's model_artifacts)."""

import json
import os
from pathlib import Path

HANDLER = '''import json
def model_fn(model_dir):
    return json.load(open(model_dir + "/weights.json"))
def input_fn(body, content_type):
    return json.loads(body)["instances"]
def predict_fn(data, model):
    return [x * model["w"] for x in data]
def output_fn(prediction, accept):
    return json.dumps({"predictions": prediction}), "application/json"
'''

model = Path(os.environ["SM_MODEL_DIR"])
(model / "code").mkdir(parents=True, exist_ok=True)
(model / "weights.json").write_text(json.dumps({"w": 3}))
(model / "code" / "inference.py").write_text(HANDLER)
print("trained on", os.environ["SM_CURRENT_HOST"], "of", os.environ["SM_HOSTS"])
