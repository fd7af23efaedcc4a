"""``serving/triton-inference-server`` on the local backend with a real ``tritonserver`` (nvidia-pytriton's 2.51).

One reference-style recipe (``framework: encoder_transformers``; inline_script heredocs write each model's
config.pbtxt and model.json, pre_script copies ``$SCRIPTS_DIR/<task>.py`` to ``1/model.py`` beside
``encoder_base.py``, then ``tritonserver --model-repository=... --http-port=8000 ...`` unchanged) serves the five
encoder models, tiny BERTs built from configs, from one server for the module. Each answers KServe v2 ``infer``
requests from a real HTTP client with the right shapes; bad requests get 4xx.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest

from mlrecipe.backends.host.images import TRITON_ENV
from tests.integration.helpers import cli, release_processes, release_tree, still_alive
from tests.integration.triton_models import HIDDEN, SEQ_LABELS, TASKS, TOKEN_LABELS, build_model, config_pbtxt
from tests.repo import REPO

pytestmark = pytest.mark.integration

RELEASE = "encoders"
TRITON = REPO / TRITON_ENV
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/tritonserver-neuronx:r26.01"


def reference_recipe() -> str:
    """The reference's triton_server.yaml form, for every task: one model per task in one repository."""
    inline, pre = [], ["export MODEL_REPO=$HOME/model_repository", "export TOKENIZERS_PARALLELISM=false",
                       "mkdir -p $HOME/logs"]
    for kind, (script, *_rest) in TASKS.items():
        extra = ', "pooling_strategy": "mean", "normalize": true' if kind == "embeddings" else ""
        inline.append(f"cat > /tmp/$MLRECIPE_RELEASE-{kind}.pbtxt <<EOF\n{config_pbtxt(kind, kind)}EOF\n")
        inline.append(f"cat > /tmp/$MLRECIPE_RELEASE-{kind}.json <<EOF\n"
                      f'{{"model_id_or_path": "$MODEL_PATH/{kind}", "bucket_batch_size": [1, 2, 4, 8], '
                      f'"bucket_seq_len": [16, 32, 64, 128]{extra}}}\nEOF\n')
        pre += [f"mkdir -p $MODEL_REPO/{kind}/1",
                f"cp /tmp/$MLRECIPE_RELEASE-{kind}.pbtxt $MODEL_REPO/{kind}/config.pbtxt",
                f"cp $SCRIPTS_DIR/{script} $MODEL_REPO/{kind}/1/model.py",
                f"cp $SCRIPTS_DIR/encoder_base.py $MODEL_REPO/{kind}/1/encoder_base.py",
                f"cp /tmp/$MLRECIPE_RELEASE-{kind}.json $MODEL_REPO/{kind}/1/model.json"]
    recipe = {
        "image": {"name": IMAGE},
        "framework": "encoder_transformers",
        "inline_script": inline,
        "pre_script": pre,
        "server": {
            "env": [{"name": "SCRIPTS_DIR", "value": "/etc/framework-scripts"},
                    {"name": "HOME", "value": "/efs/home/{{ .Release.Name }}"},
                    {"name": "MODEL_PATH", "value": "/fsx/pretrained-models/tiny-bert"}],
            "command": ["tritonserver"],
            "args": ["--model-repository=${MODEL_REPO}", "--grpc-port=8001", "--http-port=8000", "--metrics-port=8002",
                     "--disable-auto-complete-config", "--log-file=$HOME/logs/triton-server.log"],
        },
    }
    return json.dumps(recipe, indent=2)  # JSON is YAML


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory):
    """The release's base URL, with every encoder model ready; uninstalled after the module."""
    if not (TRITON / "bin" / "tritonserver").exists():
        pytest.skip(f"no Triton environment at {TRITON} (run 'make triton-env')")
    root = tmp_path_factory.mktemp("triton")
    home = root / "mlhome"
    for kind in TASKS:
        build_model(kind, home / "volumes" / "pv-fsx" / "pretrained-models" / "tiny-bert" / kind)
    recipe = root / "triton_server.yaml"
    recipe.write_text(reference_recipe())
    dry = cli(home, "install", RELEASE, "serving/triton-inference-server", "-f", str(recipe), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"runs in the local environment {TRITON}" in dry.stdout and "/v2/health/ready" in dry.stdout
    result = cli(home, "install", RELEASE, "serving/triton-inference-server", "-f", str(recipe), timeout=300)
    tree: set = set()
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        tree = release_tree(RELEASE, home)
        state = json.loads((home / "releases" / "local" / "default" / RELEASE / "state.json").read_text())
        yield next(iter(state["steps"].values()))["url"], home
    finally:
        down = cli(home, "uninstall", RELEASE)
        assert down.returncode == 0, down.stdout + down.stderr
        assert release_processes(RELEASE, home) == [], "the server is gone"
        assert still_alive(tree) == [], "and so are its python-backend stubs"


def infer(url: str, model: str, inputs: list[dict]) -> httpx.Response:
    return httpx.post(f"{url}/v2/models/{model}/infer", json={"inputs": inputs}, timeout=60)


def texts(name: str, values: list[str], shape: list[int] | None = None) -> dict:
    return {"name": name, "datatype": "BYTES", "shape": shape or [len(values), 1], "data": values}


def output(resp: httpx.Response, name: str) -> np.ndarray:
    assert resp.status_code == 200, resp.text
    out = next(o for o in resp.json()["outputs"] if o["name"] == name)
    return np.array(out["data"]).reshape(out["shape"])


def test_server_is_ready_with_every_model_on_loopback(triton) -> None:
    url, home = triton
    assert url.startswith("http://127.0.0.1:")
    assert httpx.get(url + "/v2/health/ready").status_code == 200
    index = httpx.post(url + "/v2/repository/index", json={}).json()
    assert sorted((m["name"], m["state"]) for m in index) == sorted((k, "READY") for k in TASKS)
    logs = cli(home, "logs", RELEASE).stdout
    assert "mlrecipe: tritonserver" in logs and "on 127.0.0.1: http " + url.rsplit(":", 1)[1] in logs
    server_log = (home / "volumes" / "pv-efs" / "home" / RELEASE / "logs" / "triton-server.log").read_text()
    for address in ("GRPCInferenceService at 127.0.0.1:", "HTTPService at 127.0.0.1:", "Metrics Service at 127.0.0.1:"):
        assert address in server_log


def test_embeddings(triton) -> None:
    url, _ = triton
    emb = output(infer(url, "embeddings", [texts("text_input", ["the cat sat on the mat", "hello world"])]),
                 "embeddings")
    assert emb.shape == (2, HIDDEN)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4), "normalize: true"
    again = output(infer(url, "embeddings", [texts("text_input", ["hello world"])]), "embeddings")
    assert np.allclose(again[0], emb[1], atol=1e-5), "padding in a batch does not change an embedding"


def test_masked_lm_logits_per_request_length(triton) -> None:
    url, _ = triton
    logits = output(infer(url, "masked_lm", [texts("text_input", ["the cat sat on the mat", "hello"])]), "logits")
    vocab = json.loads((Path(triton[1]) / "volumes" / "pv-fsx" / "pretrained-models" / "tiny-bert" / "masked_lm" /
                        "config.json").read_text())["vocab_size"]
    assert logits.shape == (2, 8, vocab)  # [CLS] 6 words [SEP]
    short = output(infer(url, "masked_lm", [texts("text_input", ["hello"])]), "logits")
    assert short.shape == (1, 3, vocab), "padded to the request's own longest sequence"


def test_sequence_classification(triton) -> None:
    url, _ = triton
    logits = output(infer(url, "sequence_classification", [texts("text_input", ["a", "red car", "sky"])]), "logits")
    assert logits.shape == (3, SEQ_LABELS) and np.isfinite(logits).all()


def test_token_classification_predictions_and_logits(triton) -> None:
    url, _ = triton
    resp = infer(url, "token_classification", [texts("text_input", ["the red car ran fast", "sun"])])
    preds, logits = output(resp, "predictions"), output(resp, "logits")
    assert preds.shape == (2, 7) and logits.shape == (2, 7, TOKEN_LABELS)
    assert (preds == logits.argmax(axis=-1)).all()
    assert next(o for o in resp.json()["outputs"] if o["name"] == "predictions")["datatype"] == "INT64"


def test_reranker_scores_every_document(triton) -> None:
    url, _ = triton
    docs = ["paris", "berlin germany", "the cat", "water", "fire", "moon", "sky", "tree", "car", "house"]
    resp = infer(url, "reranker", [texts("query", ["what is the capital of france"]), texts("texts", docs, [1, 10])])
    scores = output(resp, "scores")
    assert scores.shape == (1, 10) and np.isfinite(scores).all()
    single = [output(infer(url, "reranker", [texts("query", ["what is the capital of france"]),
                                             texts("texts", [d], [1, 1])]), "scores")[0, 0] for d in docs[:3]]
    assert np.allclose(single, scores[0, :3], atol=1e-4), "each document scored on its own merit, not just the first"


@pytest.mark.parametrize(("model", "inputs", "status"), [
    ("embeddings", [texts("wrong_name", ["a"])], 400),
    ("embeddings", [{"name": "text_input", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}], 400),
    ("embeddings", [texts("text_input", ["a"] * 9)], 400),  # max_batch_size 8
    ("sequence_classification", [], 400),
    ("reranker", [texts("query", ["q"])], 400),  # texts missing
    ("no_such_model", [texts("text_input", ["a"])], 404),
])
def test_bad_requests_get_4xx(triton, model: str, inputs: list[dict], status: int) -> None:
    url, _ = triton
    resp = infer(url, model, inputs)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]


def test_text_that_is_not_utf8_is_the_models_400(triton) -> None:
    """A BYTES tensor in Triton's binary form carrying invalid UTF-8: the model's own INVALID_ARG error."""
    url, _ = triton
    raw = b"\xff\xfe bad"
    binary = struct.pack("<I", len(raw)) + raw
    header = json.dumps({"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1, 1],
                                     "parameters": {"binary_data_size": len(binary)}}]}).encode()
    resp = httpx.post(f"{url}/v2/models/embeddings/infer", content=header + binary, timeout=60,
                      headers={"Inference-Header-Content-Length": str(len(header))})
    assert resp.status_code == 400, resp.text
    assert "not UTF-8" in resp.json()["error"]
    assert output(infer(url, "embeddings", [texts("text_input", ["still fine"])]), "embeddings").shape == (1, HIDDEN)


def test_vllm_and_trtllm_triton_recipes_fail_before_start_but_render_for_kubernetes(tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    vllm = REPO / "examples" / "eks" / "serving" / "triton-vllm.yaml"
    trtllm = REPO / "charts" / "machine-learning" / "serving" / "triton-inference-server" / "ci" / "trtllm-values.yaml"
    for recipe, backend in ((vllm, "vLLM"), (trtllm, "TensorRT-LLM")):
        local = cli(home, "install", "t", "serving/triton-inference-server", "-f", str(recipe), "--dry-run")
        assert local.returncode != 0
        assert f"needs Triton's {backend} backend" in local.stdout + local.stderr
        k8s = cli(home, "template", "t", "serving/triton-inference-server", "-f", str(recipe),
                  "--backend", "kubernetes")
        assert k8s.returncode == 0, k8s.stdout + k8s.stderr
        assert "kind: Deployment" in k8s.stdout
    assert not (home / "releases" / "local" / "default" / "t").exists() or not any(
        (home / "releases" / "local" / "default" / "t").rglob("node-*.log")), "nothing started"

