"""What is done, on the shared data dir: per-file done-markers, per-rank status files, the manifest.

A file counts as done only when its marker (``<file>.done``, JSON, written after the file was renamed into place)
exists, the size it records matches the file on disk (its sha256 is recorded too, for the manifest and for audits)
and it records the same ``fingerprint`` (the settings the file depends on). Anything else is redone.
Ranks report to rank 0 through ``.prepare-status/``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

STATUS_DIR = ".prepare-status"
MANIFEST = "manifest.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` atomically (temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as out:
        json.dump(data, out, indent=2, sort_keys=True)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``; None if it is missing or unreadable (a partial marker is no marker)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def marker_path(path: Path) -> Path:
    """The done-marker of ``path``."""
    return path.with_name(path.name + ".done")


def mark_done(marker: Path, files: dict[str, Path], fingerprint: str, **extra: Any) -> dict[str, Any]:
    """Record ``files`` (role -> path) as complete: sizes, sha256, the fingerprint and ``extra``; written last."""
    from mlrecipe_scripts.megatron.data.fetch import sha256_file

    data: dict[str, Any] = {"fingerprint": fingerprint, **extra, "files": {
        role: {"name": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
        for role, path in files.items()}}
    write_json(marker, data)
    return data


def done(marker: Path, fingerprint: str | None) -> dict[str, Any] | None:
    """The marker's data when every file it names is there with the recorded size and the fingerprint matches."""
    data = read_json(marker)
    if data is None or (fingerprint is not None and data.get("fingerprint") != fingerprint):
        return None
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        return None
    for entry in files.values():
        path = marker.parent / str(entry.get("name"))
        if not path.is_file() or path.stat().st_size != entry.get("bytes"):
            return None
    return data


def forget(*paths: Path) -> None:
    """Remove files and their markers (the marker first, so a crash in between leaves nothing counted as done)."""
    for path in paths:
        marker_path(path).unlink(missing_ok=True)
    for path in paths:
        path.unlink(missing_ok=True)


def status_path(data_dir: Path, rank: int) -> Path:
    """Where rank ``rank`` reports."""
    return data_dir / STATUS_DIR / f"rank-{rank}.json"


def report(data_dir: Path, rank: int, run_id: str, fingerprint: str, error: str | None, shards: list[int]) -> None:
    """Rank ``rank``'s final word: ``error`` None means every shard it owns is done."""
    path = status_path(data_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"rank": rank, "run_id": run_id, "fingerprint": fingerprint, "ok": error is None,
                      "error": error, "shards": shards})


def wait_for_ranks(data_dir: Path, size: int, run_id: str, fingerprint: str, timeout: float,
                   poll: float = 0.5) -> dict[int, dict[str, Any]]:
    """Every other rank's status of this run (same run id, or same fingerprint when the launcher gives none).

    Polls every 20 ms at first (ranks with equal shares finish together), slowing to ``poll`` over a long wait
    (about 5% of the time waited), so the manifest follows the last report closely without loading a shared file
    system. Returns early as soon as one rank reported a failure; TimeoutError names the ranks still missing."""
    started = time.monotonic()
    deadline = started + timeout
    found: dict[int, dict[str, Any]] = {}
    while True:
        for rank in range(1, size):
            if rank in found:
                continue
            data = read_json(status_path(data_dir, rank))
            if data and data.get("run_id") == run_id and data.get("fingerprint") == fingerprint:
                found[rank] = data
                if not data.get("ok"):
                    return found
        if len(found) == size - 1:
            return found
        if time.monotonic() > deadline:
            missing = sorted(set(range(1, size)) - set(found))
            raise TimeoutError(f"ranks {missing} did not report within {timeout:.0f} s")
        time.sleep(min(poll, 0.02 + (time.monotonic() - started) / 20))


class PeerFailed(Exception):
    """Another rank reported a failure while this one waited for it (the message is that rank's error)."""


def stage_path(data_dir: Path, rank: int, stage: str) -> Path:
    """Where rank ``rank`` says it passed ``stage`` (``staged``: its files are in place; ``tokenized``: its ranges
    are done)."""
    return data_dir / STATUS_DIR / f"{stage}-{rank}.json"


def exchange(data_dir: Path, rank: int, size: int, stage: str, run_id: str, fingerprint: str,
             data: dict[str, Any], timeout: float, poll: float = 0.5) -> dict[int, dict[str, Any]]:
    """Write this rank's ``stage`` report (``data`` added), then wait for every other rank's of the same run: the
    ranks' only exchange of what each needs from the others. PeerFailed as soon as a rank reported a failure
    instead; TimeoutError names the ranks still missing."""
    path = stage_path(data_dir, rank, stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {**data, "rank": rank, "run_id": run_id, "fingerprint": fingerprint})
    started = time.monotonic()
    found: dict[int, dict[str, Any]] = {}
    while True:
        for other in range(size):
            if other == rank or other in found:
                continue
            final = read_json(status_path(data_dir, other))
            if final and final.get("run_id") == run_id and final.get("fingerprint") == fingerprint \
                    and not final.get("ok"):
                raise PeerFailed(str(final.get("error")))
            report_ = read_json(stage_path(data_dir, other, stage))
            if report_ and report_.get("run_id") == run_id and report_.get("fingerprint") == fingerprint:
                found[other] = report_
        if len(found) == size - 1:
            return found
        if time.monotonic() - started > timeout:
            missing = sorted(set(range(size)) - set(found) - {rank})
            raise TimeoutError(f"ranks {missing} did not report {stage!r} within {timeout:.0f} s")
        time.sleep(min(poll, 0.02 + (time.monotonic() - started) / 20))
