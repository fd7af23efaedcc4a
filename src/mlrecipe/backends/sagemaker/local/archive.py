"""The model archive of a local-mode endpoint, checked whole before any server starts.

A ``model.tar.gz`` is read to its end (every member's data and the gzip trailer, so a truncated or corrupt archive
is found here, not by the server) and extracted only if every member is a regular file or a directory under a
relative name without ``..``: absolute names, ``..``, links (symbolic or hard), devices and FIFOs are refused.
A problem is an :class:`ArchiveError` whose message is one line.
"""

from __future__ import annotations

import shutil
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    import tarfile  # imported where an archive is read: not on a training job's way

CHUNK = 1 << 20


class ArchiveError(ValueError):
    """The model archive cannot be used (one line)."""


def _refusal(member: tarfile.TarInfo) -> str | None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith("/"):
        return "an absolute path"
    if ".." in name.parts:
        return "a '..' component"
    if member.issym() or member.islnk():
        return f"a link (to {member.linkname})"
    if not (member.isfile() or member.isdir()):
        return "not a regular file or directory"
    return None


def _read_whole(archive: Path) -> list[tarfile.TarInfo]:
    """Every member of ``archive``, each one's data read and the compressed stream read to its end."""
    import tarfile

    with tarfile.open(archive, "r:*") as tar:
        members = []
        for member in tar:
            refused = _refusal(member)
            if refused:
                raise ArchiveError(f"member {member.name!r} is {refused}")
            if member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                while data.read(CHUNK):
                    pass
            members.append(member)
        assert tar.fileobj is not None
        while tar.fileobj.read(CHUNK):  # the rest of the stream: gzip checks its length and CRC at the end
            pass
    return members


def _fetch(url: str, archive: Path, s3_client_factory: Callable[[], Any] | None) -> None:
    if url.startswith("file://"):
        shutil.copyfile(unquote(urlparse(url).path), archive)
    elif url.startswith("s3://") and s3_client_factory is not None:
        parsed = urlparse(url)
        s3_client_factory().download_file(parsed.netloc, parsed.path.lstrip("/"), str(archive))
    else:
        raise ArchiveError(f"unsupported ModelDataUrl {url!r}")


def extract_model(url: str, dest: Path, s3_client_factory: Callable[[], Any] | None = None) -> None:
    """The model at ``url`` in ``dest``: a ``file://`` directory copied as it is (mode local only: a model a step
    on another backend left on a shared volume), else the archive fetched beside ``dest``, checked whole and
    extracted. Raises :class:`ArchiveError` (one line) for anything that cannot be read or is refused."""
    import tarfile

    try:
        if url.startswith("file://") and Path(unquote(urlparse(url).path)).is_dir():
            shutil.copytree(unquote(urlparse(url).path), dest, dirs_exist_ok=True, symlinks=True)
            return
        archive = dest.with_name("model.tar.gz")
        _fetch(url, archive, s3_client_factory)
        _read_whole(archive)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except ArchiveError as exc:
        raise ArchiveError(f"the model archive {url} is refused: {exc}") from exc
    except (OSError, EOFError, ValueError, zlib.error, tarfile.TarError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ArchiveError(f"the model archive {url} cannot be read: {reason}") from exc
