"""A stand-in for Triton Inference Server with its vLLM backend, for the harness run of ``examples/eks/serving``'s
triton step (``tests/kubelet_runs/eks_examples.py`` copies it onto the ``pv-fsx`` claim and makes it the container's
command; the rendered ``args`` are kept). Run in the Triton image's environment (``.venv-triton``), it takes
``tritonserver``'s options as the recipe gives them (``--model-repository=DIR --http-port=P``; ``--grpc-port`` and
``--metrics-port`` are read and not served), loads every model of the repository as Triton's vLLM backend reads it
(``<name>/config.pbtxt`` naming ``backend: "vllm"``, ``<name>/1/model.json`` the engine arguments, ``model`` the
weights' folder) with transformers on the CPU, and answers the HTTP routes a client of that backend uses:
``GET /v2/health/live``, ``GET /v2/health/ready`` and ``GET /v2/models/<name>/ready`` (200 once every model is
loaded), ``POST /v2/models/<name>/generate`` (``text_input``, ``parameters.max_tokens``, default 16; greedy; the
answer's ``text_output`` is the prompt followed by the completion, as the vLLM backend returns it without
``exclude_input_in_output``). It binds the pod's own address (its hostname's).

Why a stand-in: ``.venv-triton``'s ``tritonserver`` is PyPI's ``nvidia-pytriton`` build, whose ``backends`` folder
has the python backend only; Triton's vLLM backend (``triton-inference-server/vllm_backend``'s ``model.py`` over the
vLLM of the ``-vllm-python-py3`` image, 0.5 for 24.08) is not there, and ``.venv-triton`` has no vLLM (vLLM's CPU
build, 0.32, is in ``.venv-vllm``, another Python environment the backend stub cannot load), so ``backend: "vllm"``
cannot load here. Standard library plus torch and transformers."""

from __future__ import annotations

import argparse
import http.server
import json
import re
import socket
import sys
from pathlib import Path
from typing import Any


def read_repository(root: Path) -> dict[str, dict[str, Any]]:
    """Each model of a Triton model repository whose ``config.pbtxt`` names the vllm backend: its ``model.json``."""
    models = {}
    for config in sorted(root.glob("*/config.pbtxt")):
        backend = re.search(r'backend\s*:\s*"([^"]+)"', config.read_text())
        if backend is None or backend.group(1) != "vllm":
            raise SystemExit(f"{config}: not a vllm backend model (this stand-in serves only those)")
        engine = json.loads((config.parent / "1" / "model.json").read_text())
        models[config.parent.name] = engine
    if not models:
        raise SystemExit(f"{root}: no model (no <name>/config.pbtxt)")
    return models


class Loaded:
    """One model's tokenizer and weights, loaded from its ``model.json``'s ``model`` folder."""

    def __init__(self, engine: dict[str, Any]) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.tokenizer = AutoTokenizer.from_pretrained(engine["model"])
        self.model = AutoModelForCausalLM.from_pretrained(engine["model"], dtype=torch.float32).eval()

    def generate(self, text: str, max_tokens: int) -> str:
        import torch

        inputs = self.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id)
        return text + str(self.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int)
    parser.add_argument("--metrics-port", type=int)
    args = parser.parse_args()
    engines = read_repository(args.model_repository)
    loaded = {}
    for name, engine in engines.items():
        loaded[name] = Loaded(engine)
        print(f"model {name} (backend vllm) loaded from {engine['model']}; model.json {json.dumps(engine)}",
              flush=True)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            ready = re.fullmatch(r"/v2/models/([^/]+)/ready", self.path)
            if self.path in ("/v2/health/live", "/v2/health/ready") or (ready and ready.group(1) in loaded):
                self._answer(200, {})
            else:
                self._answer(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            found = re.fullmatch(r"/v2/models/([^/]+)(?:/versions/1)?/generate", self.path)
            if found is None or found.group(1) not in loaded:
                self._answer(404, {"error": f"no model at {self.path}"})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            max_tokens = int((body.get("parameters") or {}).get("max_tokens", 16))
            text = loaded[found.group(1)].generate(str(body["text_input"]), max_tokens)
            self._answer(200, {"model_name": found.group(1), "model_version": "1", "text_output": text})

        def log_message(self, format: str, *args: object) -> None:
            print(f"{self.command} {self.path}", flush=True)

    host = socket.gethostbyname(socket.gethostname())
    server = http.server.ThreadingHTTPServer((host, args.http_port), Handler)
    print(f"serving {', '.join(sorted(loaded))} on {host}:{args.http_port} (HTTP; gRPC {args.grpc_port} and "
          f"metrics {args.metrics_port} not served by this stand-in)", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
