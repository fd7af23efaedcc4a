"""Honest shard downloads: HTTP status checked, bytes into ``<file>.part`` then renamed, size and sha256 checked."""

from __future__ import annotations

import hashlib
import http.client
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

CHUNK = 1 << 20


class FetchError(Exception):
    """A download that did not produce the complete, expected file."""


def read_checksums(path: Path) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <name>`` per line) -> {file name: hex digest}; ValueError naming the line."""
    sums: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        digest, _, name = line.strip().partition(" ")
        name = name.strip().lstrip("*")
        if len(digest) != 64 or not name or any(c not in "0123456789abcdef" for c in digest.lower()):
            raise ValueError(f"{path}:{number}: expected '<sha256 hex>  <file name>'")
        sums[Path(name).name] = digest.lower()
    return sums


def sha256_file(path: Path) -> str:
    """The file's sha256 (hex)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, target: Path, sha256: str | None = None, retries: int = 2, timeout: float = 60.0) -> str:
    """Fetch ``url`` into ``target`` (via ``target.part``); return the file's sha256.

    4xx answers fail at once; connection errors, 5xx and short bodies are retried ``retries`` times. The file is
    renamed into place only when the body has the announced Content-Length and, if given, the expected sha256.
    """
    part = target.with_name(target.name + ".part")
    for attempt in range(retries + 1):
        try:
            return _fetch_once(url, target, part, sha256, timeout)
        except FetchError as exc:
            part.unlink(missing_ok=True)
            transient = getattr(exc, "transient", False)
            if not transient or attempt == retries:
                raise
            time.sleep(min(2.0**attempt, 10.0))
    raise AssertionError("unreachable")


def _transient(message: str) -> FetchError:
    exc = FetchError(message)
    exc.transient = True  # type: ignore[attr-defined]
    return exc


def _fetch_once(url: str, target: Path, part: Path, sha256: str | None, timeout: float) -> str:
    digest = hashlib.sha256()
    written = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status = getattr(response, "status", 200)
            if status != 200:
                raise FetchError(f"HTTP {status} from {url}")
            length = response.headers.get("Content-Length")
            with part.open("wb") as out:
                while block := response.read(CHUNK):
                    out.write(block)
                    digest.update(block)
                    written += len(block)
                out.flush()
                os.fsync(out.fileno())
    except urllib.error.HTTPError as exc:
        message = f"HTTP {exc.code} {exc.reason} from {url}"
        raise (_transient(message) if exc.code >= 500 else FetchError(message)) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError) as exc:
        raise _transient(f"download of {url} failed: {exc}") from None
    if length is not None and written != int(length):
        raise _transient(f"short download from {url}: {written} of {length} bytes")
    found = digest.hexdigest()
    if sha256 is not None and found != sha256:
        raise FetchError(f"sha256 mismatch for {url}: got {found}, the checksum file says {sha256}")
    os.replace(part, target)
    return found
