"""A real moto server (``moto[server]``) on 127.0.0.1: SageMaker, S3, STS, IAM and CloudWatch Logs over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mlrecipe.ports import free_port

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
BUCKET = "mlrecipe-test"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExec"


@dataclass
class Moto:
    """Where the server listens, and boto3 clients that talk to it."""

    url: str

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def configure(self, home: Path) -> Path:
        """Write ``home``'s config.yaml: the SageMaker backend against this server (role, bucket, quick polls)."""
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.yaml").write_text(textwrap.dedent(f"""
            sagemaker:
              endpoint_url: {self.url}
              region: us-east-1
              role_arn: {ROLE}
              s3_prefix: s3://{BUCKET}/runs
              poll_seconds: 0.2
            """))
        return home


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Moto]:
    """A moto server process for one test (its state dies with it), with a bucket; credentials are dummies."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install 'moto[server]')")
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **CREDENTIALS})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto server did not start (exit {proc.poll()})")
                time.sleep(0.1)
        moto = Moto(f"http://127.0.0.1:{port}")
        moto.client("s3").create_bucket(Bucket=BUCKET)
        yield moto
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
