"""Stage a job's input channels into its hosts' ``/opt/ml/input/data/<channel>/``, as SageMaker's File mode does.

``S3Uri`` may be ``file://`` (a local file or directory) or ``s3://`` (read through an S3 client, e.g. one made with
the backend's ``endpoint_url``). ``ShardedByS3Key`` gives each host every N-th object; ``FullyReplicated`` all.
File-system channels (FSx/EFS) are bind mounts of a local directory ``<file_systems_root>/<FileSystemId>/<path>``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

S3ClientFactory = Callable[[], Any]


class StagingError(Exception):
    """A channel cannot be staged (the job fails with this as its reason, as SageMaker's would)."""


def _local_objects(uri: str) -> list[tuple[str, Path]]:
    parsed = urlparse(uri)
    if (parsed.hostname or "").lower() not in ("", "localhost"):
        raise StagingError(f"ValidationException: {uri}: a file:// URI names this machine's files (file:///path)")
    path = Path(unquote(parsed.path))
    if path.is_file():
        return [(path.name, path)]
    if path.is_dir():
        return [(str(p.relative_to(path)), p) for p in sorted(path.rglob("*")) if p.is_file()]
    raise StagingError(f"ClientError: data source {uri} does not exist")


def _s3_keys(client: Any, uri: str) -> list[tuple[str, str, str]]:
    parsed = urlparse(uri)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            if key.endswith("/"):
                continue
            rel = key[len(prefix):].lstrip("/") if prefix and not prefix.endswith("/") else key[len(prefix):]
            out.append((rel or Path(key).name, bucket, key))
    if not out:
        raise StagingError(f"ClientError: no objects under {uri}")
    return out


def _inside(root: Path, rel: str, what: str) -> Path:
    """``root / rel``, refused (:class:`StagingError`) when ``rel`` goes up out of ``root`` with ``..``."""
    if ".." in Path(rel).parts or Path(rel).is_absolute():
        raise StagingError(f"ValidationException: {what} leaves its directory ('..')")
    return root / rel


def stage_channels(channels: list[dict[str, Any]], trees: list[Path], s3_factory: S3ClientFactory | None) -> None:
    """Copy every S3-data-source channel into each host's tree (``trees[i]`` is host ``i``'s ``/opt/ml``)."""
    client: Any = None
    for ch in channels:
        source = (ch.get("DataSource") or {}).get("S3DataSource")
        if not source:
            continue
        uri = source["S3Uri"]
        sharded = source.get("S3DataDistributionType") == "ShardedByS3Key"
        targets = [tree / "input" / "data" / ch["ChannelName"] for tree in trees]
        if uri.startswith("file://"):
            items: list[tuple[str, Any]] = _local_objects(uri)
        elif uri.startswith("s3://"):
            if client is None:
                if s3_factory is None:
                    raise StagingError(f"ClientError: channel {ch['ChannelName']}: no S3 client for {uri}")
                client = s3_factory()
            items = [(rel, (bucket, key)) for rel, bucket, key in _s3_keys(client, uri)]
        else:
            raise StagingError(f"ClientError: channel {ch['ChannelName']}: unsupported URI {uri}")
        for i, (rel, obj) in enumerate(items):
            hosts = [targets[i % len(targets)]] if sharded else targets
            for target in hosts:
                dest = _inside(target, rel, f"channel {ch['ChannelName']}: object {rel}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(obj, Path):
                    shutil.copyfile(obj, dest)
                else:
                    try:
                        client.download_file(obj[0], obj[1], str(dest))
                    except Exception as exc:  # botocore's errors vary by cause; each one fails the job
                        raise StagingError(f"ClientError: cannot download s3://{obj[0]}/{obj[1]}: {exc}") from exc


def file_system_mounts(channels: list[dict[str, Any]], file_systems_root: Path) -> list[tuple[Path, str]]:
    """(local directory, mount point in the host) for each file-system channel; the directories are created."""
    out = []
    for ch in channels:
        fs = (ch.get("DataSource") or {}).get("FileSystemDataSource")
        if not fs:
            continue
        root = file_systems_root / fs["FileSystemId"]
        source = _inside(root, fs.get("DirectoryPath", "/").strip("/"), f"channel {ch['ChannelName']}: DirectoryPath")
        source.mkdir(parents=True, exist_ok=True)
        out.append((source, f"/opt/ml/input/data/{ch['ChannelName']}"))
    return out
