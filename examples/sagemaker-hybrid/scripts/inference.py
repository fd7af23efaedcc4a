"""The endpoint's inference handler (SageMaker's PyTorch serving contract), packed as ``code/inference.py``.

Requests are JSON ``{"instances": [[...8x8 or 64 values...], ...]}`` (raw digits, 0..16); answers are
``{"predictions": [label, ...]}``. Preprocessing is ``preprocess.to_model_input``, the function training used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # preprocess.py and model.py are packed beside this file

from model import build_model
from preprocess import to_model_input

JSON = "application/json"


def model_fn(model_dir: str) -> torch.nn.Module:
    model = build_model()
    model.load_state_dict(torch.load(Path(model_dir) / "model.pth", map_location="cpu", weights_only=True))
    return model.eval()


def input_fn(body: bytes | str, content_type: str = JSON) -> torch.Tensor:
    if content_type.split(";")[0].strip() != JSON:
        raise ValueError(f"unsupported content type {content_type!r}: send {JSON}")
    instances = json.loads(body)["instances"]
    return to_model_input(instances)


def predict_fn(data: torch.Tensor, model: torch.nn.Module) -> list[int]:
    with torch.no_grad():
        return model(data).argmax(dim=1).tolist()


def output_fn(prediction: Any, accept: str = JSON) -> str:
    return json.dumps({"predictions": prediction})
