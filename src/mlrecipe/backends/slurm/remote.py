"""A Slurm step submitted from a laptop: its files on the login node, staged by digest, and its logs mirrored back.

Layout on the cluster (``remote_root``, ``~/.mlrecipe`` by default, resolved by the login node's shell): the
release's state directory keeps its path relative to ``$MLRECIPE_HOME`` (``releases/slurm/<ns>/<release>/...``,
and pvc volumes under ``volumes/``), the pipeline directory becomes ``pipelines/<ns>/<release>/``. The batch
script is the local one with those two prefixes replaced.

Staging compares sha256 digests (coreutils' ``sha256sum``, ``base64`` and ``tar`` are on every login node;
rsync often is not, and each rsync run is its own round trip). A :class:`Stager` lists the digests on the
login node once per process (riding on the round trip that resolves ``remote_root``), then every
submission is ONE round trip: a script on ssh's stdin that checks (``sha256sum -c``) that the files
staged before are unchanged, unpacks only the files whose digest differs (a base64 tar), and runs
sbatch. What it knows (the resolved root, the digests it staged) is kept between commands in
``$MLRECIPE_HOME/ssh/<target>.json`` (paths and digests only), so a later command's first step is one round
trip too; only a process with no such record pays a second. Should a checked file have changed on the
cluster, nothing is submitted and the stager lists again and re-sends: the record is a hint, never trusted.

Logs come back over the same connection: each poll appends to the local ``batch.log`` /
``node-<rank>.log`` what grew on the cluster since (``tail -c +N``), so ``logs -f`` on the laptop
follows the nodes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from mlrecipe.backends.slurm.transport import STALE_MARK, STALE_STATUS, SshTarget, SshTransport
from mlrecipe.errors import SlurmError

#: Files of the pipeline directory larger than this are not staged (a data set belongs on a pvc volume).
MAX_STAGED_BYTES = 64 * 1024 * 1024
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "node_modules"})


@dataclass
class RemotePlan:
    """How one step's files map onto the login node (``root``: ``remote_root`` as configured, or resolved)."""

    target: SshTarget
    root: str
    local_home: Path
    pipeline_dir: Path | None
    namespace: str
    release: str
    pipeline_files: list[Path] = field(default_factory=list)

    def with_root(self, root: str) -> RemotePlan:
        return RemotePlan(self.target, root, self.local_home, self.pipeline_dir, self.namespace, self.release,
                          self.pipeline_files)

    @property
    def remote_pipeline_dir(self) -> str:
        return f"{self.root.rstrip('/')}/pipelines/{self.namespace}/{self.release}"

    def map_text(self, text: str) -> str:
        """``text`` (a script, a program) with this machine's paths replaced by the login node's."""
        pairs = [(str(self.local_home), self.root.rstrip("/"))]
        if self.pipeline_dir is not None:
            pairs.append((str(self.pipeline_dir), self.remote_pipeline_dir))
        for local, remote in sorted(pairs, key=lambda p: -len(p[0])):
            text = text.replace(local, remote)
        return text

    def map_path(self, path: Path) -> str:
        return self.map_text(str(path))

    def pipeline_payload(self) -> dict[str, tuple[bytes, int]]:
        """The pipeline directory's files, at their place on the cluster."""
        out: dict[str, tuple[bytes, int]] = {}
        if self.pipeline_dir is None:
            return out
        for rel in self.pipeline_files:
            source = self.pipeline_dir / rel
            out[f"{self.remote_pipeline_dir}/{rel.as_posix()}"] = (source.read_bytes(), source.stat().st_mode & 0o777)
        return out


def pipeline_files(directory: Path) -> list[Path]:
    """The files of the pipeline directory that are staged (relative paths; hidden and cache dirs left out)."""
    out: list[Path] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part in SKIPPED_DIRS or part.startswith(".") for part in rel.parts):
            continue
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_STAGED_BYTES:
            out.append(rel)
    return out


def resolve_root(transport: SshTransport, root: str, relative: list[str] | None = None) -> tuple[str, dict[str, str]]:
    """``remote_root`` as an absolute path on the login node (created if missing), and in the same round trip
    the sha256 of each ``relative`` path under it that exists there (keyed by absolute path)."""
    spelled = f'"$HOME"/{shlex.quote(root[2:])}' if root.startswith("~/") else (
        '"$HOME"' if root == "~" else shlex.quote(root))
    sums = "".join(f"sha256sum -- {shlex.quote(r)} 2>/dev/null || true\n" for r in relative or [])
    result = transport.run_script(f"set -e\nmkdir -p {spelled}\ncd {spelled}\npwd -P\n{sums}", timeout=60)
    lines = result.stdout.splitlines()
    if result.returncode != 0 or not lines:
        raise SlurmError(f"cannot create remote_root {root} on {transport.remote.host if transport.remote else '?'}: "
                         f"{result.stderr.strip()}")
    resolved = lines[0]
    digests = {}
    for line in lines[1:]:
        sha, _, name = line.partition("  ")
        digests[f"{resolved}/{name}"] = sha
    return resolved, digests


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def remote_digests(transport: SshTransport, paths: list[str]) -> dict[str, str]:
    """The sha256 of each of ``paths`` that exists on the login node (one round trip)."""
    there: dict[str, str] = {}
    if not paths:
        return there
    check = "".join(f"sha256sum -- {shlex.quote(p)} 2>/dev/null || true\n" for p in paths)
    for line in transport.run_script(check, timeout=60).stdout.splitlines():
        sha, _, name = line.partition("  ")
        there[name] = sha
    return there


def _tar(files: dict[str, tuple[bytes, int]], paths: list[str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for p in paths:
            data, mode = files[p]
            info = tarfile.TarInfo(p.lstrip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Stager:
    """What this process knows is staged on one login node (path -> sha256), and the staging prelude from it."""

    def __init__(self, transport: SshTransport) -> None:
        self.transport = transport
        self.known: dict[str, str] | None = None

    def prelude(self, files: dict[str, tuple[bytes, int]], dirs: list[str]) -> tuple[str, list[str]]:
        """Shell lines that check the unchanged files, create ``dirs`` and unpack the rest; and the paths sent."""
        if self.known is None:
            self.known = remote_digests(self.transport, sorted(files))
        unchanged = [p for p in sorted(files) if self.known.get(p) == digest(files[p][0])]
        sent = [p for p in sorted(files) if p not in unchanged]
        lines = []
        if unchanged:
            sums = "".join(f"{self.known[p]}  {p}\n" for p in unchanged)
            lines.append(f"sha256sum -c --status - <<'MLRECIPE_SUMS' || {{ echo '{STALE_MARK}: staged files changed "
                         f"on the login node' >&2; exit {STALE_STATUS}; }}\n{sums}MLRECIPE_SUMS")
        mkdirs = sorted(set(dirs) | {str(Path(p).parent) for p in sent})
        if mkdirs:
            lines.append(f"mkdir -p -- {' '.join(shlex.quote(d) for d in mkdirs)}")
        if sent:
            encoded = base64.encodebytes(_tar(files, sent)).decode()
            lines.append(f"base64 -d <<'MLRECIPE_TAR' | tar -x -o -m -f - -C /\n{encoded}MLRECIPE_TAR")
        return "\n".join(lines) + "\n", sent

    def staged(self, files: dict[str, tuple[bytes, int]]) -> None:
        """The prelude ran: the login node holds ``files``."""
        if self.known is not None:
            self.known.update({p: digest(data) for p, (data, _) in files.items()})

    def forget(self) -> None:
        self.known = None


def stage(transport: SshTransport, files: dict[str, tuple[bytes, int]], dirs: list[str] | None = None) -> list[str]:
    """Copy to the login node the files whose sha256 differs there; create ``dirs``. Returns the copied paths
    (two round trips: the digests, then one tar stream; a submission uses :class:`Stager` instead)."""
    paths = sorted(files)
    there = remote_digests(transport, paths)
    changed = [p for p in paths if there.get(p) != digest(files[p][0])]
    mkdirs = sorted(set(dirs or []) | {str(Path(p).parent) for p in changed})
    if not changed and not mkdirs:
        return []
    make = f"mkdir -p -- {' '.join(shlex.quote(d) for d in mkdirs)}" if mkdirs else "true"
    result = transport.run_bytes(["sh", "-c", f"set -e; {make}; tar -x -o -m -f - -C /"], _tar(files, changed),
                                 timeout=300)
    if result.returncode != 0:
        raise SlurmError(f"staging to {transport.remote.host if transport.remote else '?'} failed: "
                         f"{result.stderr.decode(errors='replace').strip()}")
    return changed


def mirror_logs(transport: SshTransport, remote_dir: str, local_dir: Path, names: list[str]) -> None:
    """Append to ``local_dir/<name>`` what ``remote_dir/<name>`` gained since (the local size is the offset)."""
    local_dir.mkdir(parents=True, exist_ok=True)
    specs = " ".join(shlex.quote(f"{n}:{(local_dir / n).stat().st_size if (local_dir / n).exists() else 0}")
                     for n in names)
    script = (f"cd {shlex.quote(remote_dir)} 2>/dev/null || exit 0\n"
              f"for spec in {specs}; do f=${{spec%:*}}; o=${{spec##*:}}; [ -f \"$f\" ] || continue; "
              "s=$(wc -c < \"$f\"); [ \"$s\" -gt \"$o\" ] || continue; n=$((s - o)); "
              "printf '%s %s\\n' \"$f\" \"$n\"; tail -c +$((o + 1)) \"$f\" | head -c \"$n\"; done\n")
    out = transport.run_bytes(["sh", "-s"], script.encode(), timeout=60).stdout
    while out:
        header, _, rest = out.partition(b"\n")
        name, _, size = header.decode(errors="replace").partition(" ")
        if name not in names or not size.isdigit():
            return
        chunk, out = rest[:int(size)], rest[int(size):]
        with open(local_dir / name, "ab") as fh:
            fh.write(chunk)


def record_path(target: SshTarget, root: str) -> Path:
    """Where this machine keeps what it staged through ``target`` under ``root`` (no secret: paths, digests)."""
    from mlrecipe.config import mlrecipe_home

    key = hashlib.sha256(json.dumps([target.host, target.port, root]).encode()).hexdigest()[:16]
    return mlrecipe_home() / "ssh" / f"staged-{key}.json"


def load_record(path: Path) -> tuple[str | None, dict[str, str]]:
    """The resolved root and the staged digests of an earlier command (nothing when unreadable)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        data = json.loads(path.read_text(encoding="utf-8"))
        root, digests = data.get("root"), data.get("digests")
        if isinstance(root, str) and isinstance(digests, dict):
            return root, {str(k): str(v) for k, v in digests.items()}
    return None, {}


def save_record(path: Path, root: str, digests: dict[str, str]) -> None:
    """Keep the resolved root and the staged digests for the next command (best effort)."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"root": root, "digests": digests}, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
