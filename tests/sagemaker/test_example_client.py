"""The hybrid example's client step (``examples/sagemaker-hybrid/scripts/client.py``) run as a process, both ways it
calls an endpoint.

Mode aws: its real boto3 ``InvokeEndpoint`` calls go through a recording proxy on 127.0.0.1 to a real moto server,
whose sagemaker-runtime answers with the results the test queues (``/moto-api/static/sagemaker/endpoint-results``);
the proxy shows what was sent (path, SigV4 scope, content type, body), the client's line and exit status show how
the answers were scored. Mode local: plain HTTP to ``<url>/invocations`` of a server on 127.0.0.1, with a boto3 on
the path that fails on import (boto3 is imported only for mode aws). Bad arguments: exit 2 naming both ways.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from tests.repo import EXAMPLES
from tests.sagemaker.moto_server import CREDENTIALS, Moto, moto_server  # noqa: F401

pytestmark = pytest.mark.integration

CLIENT = EXAMPLES / "sagemaker-hybrid" / "scripts" / "client.py"
ENDPOINT = "sagemaker-hybrid-endpoint-0123abcd"
KEYS = {k: v for k, v in CREDENTIALS.items() if k != "AWS_DEFAULT_REGION"}  #: dummies; each test sets the region
RUNTIME_URL = f"https://runtime.sagemaker.us-west-2.amazonaws.com/endpoints/{ENDPOINT}"


@dataclass
class Seen:
    """One request a test server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """A server on 127.0.0.1 and the requests it received."""

    url: str
    seen: list[Seen] = field(default_factory=list)


def _serve(answer: Callable[[Seen], tuple[int, dict[str, str], bytes]]) -> Iterator[Recorder]:
    """A threaded HTTP server on 127.0.0.1 that records each POST and answers it with ``answer``."""
    recorder = Recorder("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen = Seen("POST", self.path, dict(self.headers.items()),
                        self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            recorder.seen.append(seen)
            status, headers, body = answer(seen)
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def runtime_proxy(moto_server: Moto) -> Iterator[Recorder]:  # noqa: F811
    """A recording proxy in front of the moto server: what the client's botocore sent, as sent."""
    target = urlsplit(moto_server.url)

    def forward(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=30)
        try:
            connection.request(seen.method, seen.path, body=seen.body, headers=seen.headers)
            reply = connection.getresponse()
            keep = {k: v for k, v in reply.getheaders() if k.lower().startswith(("content-type", "x-amzn"))}
            return reply.status, keep, reply.read()
        finally:
            connection.close()

    yield from _serve(forward)


def _digits(tmp_path: Path, count: int) -> tuple[Path, np.ndarray, np.ndarray]:
    """``test.npz`` as the data step writes it: raw 8x8 digits (0..16) and their labels."""
    rng = np.random.default_rng(7)
    images = rng.integers(0, 17, size=(count, 8, 8)).astype(np.uint8)
    labels = rng.integers(0, 10, size=count).astype(np.int64)
    data = tmp_path / "digits"
    data.mkdir()
    np.savez(data / "test.npz", images=images, labels=labels)
    return data, images, labels


def _queue(moto: Moto, region: str, answers: list[list[int]]) -> None:
    """Queue one moto sagemaker-runtime result per request: the endpoint's ``{"predictions": [...]}`` answers."""
    results = [{"Body": json.dumps({"predictions": a}), "ContentType": "application/json"} for a in answers]
    request = urllib.request.Request(f"{moto.url}/moto-api/static/sagemaker/endpoint-results",
                                     data=json.dumps({"region": region, "results": results}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 201


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The client as the step runs it, with only the environment given (no shared AWS config of this machine)."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
            "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials")}
    return subprocess.run([sys.executable, str(CLIENT), *args], capture_output=True, text=True, timeout=120,
                          env={**base, **env})


def _answers(labels: np.ndarray, wrong: set[int], batch: int) -> list[list[int]]:
    """Per request, the predictions: the right label except at the indices in ``wrong``."""
    predicted = [int(y) if i not in wrong else (int(y) + 1) % 10 for i, y in enumerate(labels)]
    return [predicted[start:start + batch] for start in range(0, len(predicted), batch)]


@pytest.mark.parametrize(("min_accuracy", "status"), [("0.85", 0), ("0.9", 1)])
def test_mode_aws_invokes_the_endpoint_signed_and_scores_its_answers(
        tmp_path: Path, moto_server: Moto, runtime_proxy: Recorder, min_accuracy: str,  # noqa: F811
        status: int) -> None:
    data, images, labels = _digits(tmp_path, 20)
    _queue(moto_server, "us-west-2", _answers(labels, {0, 11, 12}, batch=5))  # 17 of 20 right
    run = _run(tmp_path, "--url", RUNTIME_URL, "--endpoint-name", ENDPOINT, "--runtime-endpoint-url",
               runtime_proxy.url, "--data-dir", str(data), "--count", "20", "--batch", "5", "--min-accuracy",
               min_accuracy, **KEYS, AWS_DEFAULT_REGION="eu-west-1")  # the runtime URL's region wins
    assert run.returncode == status, run.stdout + run.stderr
    assert f"endpoint accuracy 0.85 (17/20 held-out digits; InvokeEndpoint {ENDPOINT} (us-west-2))" in run.stdout

    assert len(runtime_proxy.seen) == 4
    for i, seen in enumerate(runtime_proxy.seen):
        assert (seen.method, seen.path) == ("POST", f"/endpoints/{ENDPOINT}/invocations")
        assert seen.headers["Content-Type"] == "application/json"
        assert seen.headers["Accept"] == "application/json"
        authorization = seen.headers["Authorization"]
        assert authorization.startswith("AWS4-HMAC-SHA256 Credential=testing/"), authorization
        assert "/us-west-2/sagemaker/aws4_request" in authorization and "Signature=" in authorization
        assert "X-Amz-Date" in seen.headers
        assert json.loads(seen.body) == {"instances": images[5 * i:5 * i + 5].tolist()}


def test_mode_aws_by_name_with_botocore_endpoint_and_region_from_the_environment(
        tmp_path: Path, moto_server: Moto, runtime_proxy: Recorder) -> None:  # noqa: F811
    data, _, labels = _digits(tmp_path, 6)
    _queue(moto_server, "ap-southeast-2", _answers(labels, set(), batch=4))
    run = _run(tmp_path, "--data-dir", str(data), "--count", "6", "--batch", "4", **KEYS,
               ENDPOINT_NAME=ENDPOINT, AWS_REGION="ap-southeast-2",
               AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=runtime_proxy.url)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "endpoint accuracy 1.00 (6/6 held-out digits" in run.stdout
    assert [s.path for s in runtime_proxy.seen] == [f"/endpoints/{ENDPOINT}/invocations"] * 2
    assert all("/ap-southeast-2/sagemaker/aws4_request" in s.headers["Authorization"] for s in runtime_proxy.seen)


def test_mode_aws_an_answer_without_predictions_is_an_error(tmp_path: Path, moto_server: Moto) -> None:  # noqa: F811
    data, _, _ = _digits(tmp_path, 3)  # nothing queued: moto answers its canned body "body"
    run = _run(tmp_path, "--endpoint-name", ENDPOINT, "--region", "us-east-1", "--runtime-endpoint-url",
               moto_server.url, "--data-dir", str(data), "--count", "3", **KEYS)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "client: error: the answer is not" in run.stderr and "b'body'" in run.stderr
    assert "endpoint accuracy" not in run.stdout


@pytest.fixture
def local_endpoint() -> Iterator[Recorder]:
    """A mode local endpoint's stand-in: ``POST /invocations`` answers digit ``image[0][0] % 10`` per instance."""

    def answer(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        if seen.path != "/invocations":
            return 404, {}, b""
        predictions = [int(image[0][0]) % 10 for image in json.loads(seen.body)["instances"]]
        return 200, {"Content-Type": "application/json"}, json.dumps({"predictions": predictions}).encode()

    yield from _serve(answer)


def test_mode_local_posts_plain_http_to_invocations_without_boto3(tmp_path: Path, local_endpoint: Recorder) -> None:
    data, images, _ = _digits(tmp_path, 20)
    labels = images[:, 0, 0].astype(np.int64) % 10
    labels[[3, 17]] = (labels[[3, 17]] + 1) % 10  # 18 of 20 right
    np.savez(data / "test.npz", images=images, labels=labels)
    poisoned = tmp_path / "poisoned" / "boto3"
    poisoned.mkdir(parents=True)
    (poisoned / "__init__.py").write_text("raise ImportError('boto3 imported for a mode local endpoint')\n")
    run = _run(tmp_path, f"--url={local_endpoint.url}/", f"--endpoint-name={ENDPOINT}", "--data-dir", str(data),
               "--count", "20", "--batch", "10", PYTHONPATH=str(poisoned.parent))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"endpoint accuracy 0.90 (18/20 held-out digits; POST {local_endpoint.url}/invocations)" in run.stdout
    assert [(s.method, s.path) for s in local_endpoint.seen] == [("POST", "/invocations")] * 2
    for i, seen in enumerate(local_endpoint.seen):
        assert seen.headers["Content-Type"] == "application/json" and "Authorization" not in seen.headers
        assert json.loads(seen.body) == {"instances": images[10 * i:10 * i + 10].tolist()}


@pytest.mark.parametrize(("args", "words"), [
    ([], ["--url", "--endpoint-name", "no endpoint"]),
    (["--url=", "--endpoint-name="], ["--url", "--endpoint-name", "no endpoint"]),  # the recipe's args, both empty
    (["--url", RUNTIME_URL], ["SageMaker runtime", "--endpoint-name"]),
    (["--endpoint-name", ENDPOINT], ["region"]),
])
def test_bad_arguments_are_a_usage_error(tmp_path: Path, args: list[str], words: list[str]) -> None:
    run = _run(tmp_path, *args, "--data-dir", str(tmp_path / "absent"))
    assert run.returncode == 2, run.stdout + run.stderr
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith("client.py: error:") and all(w in error for w in words), error


def _pre_script() -> str:
    import yaml

    lines = yaml.safe_load((CLIENT.parents[1] / "recipes" / "client.yaml").read_text())["pre_script"]
    return "\n".join(lines)


@pytest.mark.parametrize(("url", "has_boto3", "installs"), [
    (RUNTIME_URL, False, True), (RUNTIME_URL, True, False), ("http://127.0.0.1:8080", False, False),
])
def test_the_client_step_installs_boto3_only_for_a_sagemaker_runtime_url(
        tmp_path: Path, url: str, has_boto3: bool, installs: bool) -> None:
    """The recipe's pre_script, run by bash as the step runtime runs it, with a ``python3`` on the path that records
    its arguments and has boto3 or not (the image of the recipe has none)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    fake = bin_dir / "python3"
    fake.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n'
                    f'[ "$1" = -c ] && exit {0 if has_boto3 else 1}\nexit 0\n')
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MLRECIPE_ENDPOINT_URL": url}
    done = subprocess.run(["bash", "-c", _pre_script()], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    seen = calls.read_text().splitlines() if calls.exists() else []
    assert ("-m pip install --quiet --no-input boto3" in seen) is installs
    assert bool(seen) is url.startswith("https://runtime.sagemaker.")
