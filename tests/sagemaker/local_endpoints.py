"""What the local-mode endpoint tests share: a model archive written here and the wait for an endpoint to settle."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path
from typing import Any


def model_archive(path: Path, files: dict[str, bytes]) -> str:
    """A ``model.tar.gz`` holding ``files`` (name -> bytes), as the ``file://`` URI a model's ``ModelDataUrl`` takes."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.as_uri()


def settled(client: Any, name: str, timeout: float = 60) -> dict:
    """``describe_endpoint`` once the endpoint is no longer ``Creating`` (the deadline only bounds the wait)."""
    deadline = time.monotonic() + timeout
    while True:
        out = client.describe_endpoint(EndpointName=name)
        if out["EndpointStatus"] != "Creating":
            return out
        assert time.monotonic() < deadline, "endpoint still Creating"
        time.sleep(0.1)
