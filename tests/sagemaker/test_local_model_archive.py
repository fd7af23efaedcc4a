"""Local-mode endpoints and their model archive (issue 41 R1): an archive that cannot be read whole (truncated,
its gzip trailer cut, not an archive) or is hostile (absolute names, ``..``, links, devices, FIFOs) makes the
endpoint ``Failed`` at once with a one-line reason; nothing of it is extracted and no server starts. An endpoint
whose creation was interrupted before its server started is ``Failed``, never ``Creating`` for ever."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("botocore", reason="the sagemaker extra (boto3) is not installed")

from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient


def _member(name: str, data: bytes = b"x", **fields: object) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


BIG = os.urandom(300_000)  # incompressible: a cut in the middle is a cut in this member's data
GOOD = [_member("weights.json", b'{"w": 3}'), _member("big.bin", BIG)]
ARCHIVES: dict[str, Callable[[], bytes]] = {
    "truncated": lambda: _tar(GOOD)[:len(_tar(GOOD)) // 2],
    "gzip trailer cut": lambda: _tar(GOOD)[:-4],
    "not an archive": lambda: b"<html>AccessDenied</html>\n",
    "absolute path": lambda: _tar([*GOOD, _member("/tmp/planted")]),
    "dot-dot": lambda: _tar([*GOOD, _member("code/../../planted")]),
    "symlink": lambda: _tar([*GOOD, _member("code", b"", type=tarfile.SYMTYPE, linkname="/etc", size=0)]),
    "hard link": lambda: _tar([*GOOD, _member("passwd", b"", type=tarfile.LNKTYPE, linkname="weights.json",
                                              size=0)]),
    "device": lambda: _tar([*GOOD, _member("null", b"", type=tarfile.CHRTYPE, devmajor=1, devminor=3, size=0)]),
    "fifo": lambda: _tar([*GOOD, _member("pipe", b"", type=tarfile.FIFOTYPE, size=0)]),
}
REASONS = {"truncated": "cannot be read", "gzip trailer cut": "cannot be read", "not an archive": "cannot be read",
           "absolute path": "an absolute path", "dot-dot": "a '..' component", "symlink": "a link",
           "hard link": "a link", "device": "not a regular file", "fifo": "not a regular file"}


def _deploy(client: LocalSageMakerClient, name: str, url: str) -> None:
    client.create_model(ModelName=name, ExecutionRoleArn="arn:aws:iam::000000000000:role/local",
                        PrimaryContainer={"Image": "local/mlrecipe-serve:latest", "ModelDataUrl": url})
    client.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}])
    client.create_endpoint(EndpointName=name, EndpointConfigName=name)


@pytest.mark.parametrize("kind", sorted(ARCHIVES))
def test_a_bad_archive_fails_the_endpoint_at_once(kind: str, tmp_path: Path) -> None:
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(ARCHIVES[kind]())
    client = LocalSageMakerClient(tmp_path / "sm")
    _deploy(client, "ep", archive.as_uri())
    out = client.describe_endpoint(EndpointName="ep")  # the first look, no waiting: Failed already
    assert out["EndpointStatus"] == "Failed"
    reason = out["FailureReason"]
    assert "\n" not in reason and archive.as_uri() in reason and REASONS[kind] in reason, reason
    home = tmp_path / "sm" / "endpoints" / "ep"
    assert sorted(p.name for p in home.iterdir()) == ["endpoint.json"]  # nothing extracted, no server log
    assert json.loads((home / "endpoint.json").read_text())["server"] is None
    assert not (tmp_path / "planted").exists() and not Path("/tmp/planted").exists()
    client.delete_endpoint(EndpointName="ep")
    assert not home.exists()


def test_an_endpoint_whose_creator_died_before_its_server_started_is_failed(tmp_path: Path) -> None:
    client = LocalSageMakerClient(tmp_path / "sm")
    home = tmp_path / "sm" / "endpoints" / "ep"
    home.mkdir(parents=True)
    record = {"request": {"EndpointName": "ep", "EndpointConfigName": "ep"}, "arn": "arn:ep", "created": 0.0,
              "modified": 0.0, "status": "Creating", "failure_reason": None, "port": None, "server": None,
              "variant": {"VariantName": "AllTraffic"}}  # as an interrupted create (or an older version) left it
    (home / "endpoint.json").write_text(json.dumps(record))
    out = client.describe_endpoint(EndpointName="ep")
    assert out["EndpointStatus"] == "Failed" and "interrupted" in out["FailureReason"]


def test_a_server_log_planted_as_a_link_fails_the_endpoint_and_is_not_written_through(tmp_path: Path) -> None:
    """The model server starts as a node of the host layer, whose log is never written through a link."""
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(_tar(GOOD))
    client = LocalSageMakerClient(tmp_path / "sm")
    home = tmp_path / "sm" / "endpoints" / "ep"
    home.mkdir(parents=True)
    outside = tmp_path / "outside.log"
    outside.write_text("kept\n")
    (home / "server.log").symlink_to(outside)
    try:
        _deploy(client, "ep", archive.as_uri())
        out = client.describe_endpoint(EndpointName="ep")  # the first look, no waiting: Failed already
        assert out["EndpointStatus"] == "Failed"
        assert "cannot start" in out["FailureReason"] and "symbolic link" in out["FailureReason"], out
        assert json.loads((home / "endpoint.json").read_text())["server"] is None
    finally:
        client.delete_endpoint(EndpointName="ep")
    assert outside.read_text() == "kept\n"
