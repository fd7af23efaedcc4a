"""The state record of one release, persisted as JSON and replaced atomically on every change.

Nothing here escapes ``$MLRECIPE_HOME``: a record read from disk is written back and removed where it was read
(:attr:`ReleaseRecord.directory`), never at a path built from its contents; a symbolic link between
``$MLRECIPE_HOME`` and a file mlrecipe writes is refused (:func:`check_no_links`), not followed. A record that
cannot be read is reported as corrupt (:class:`~mlrecipe.errors.CorruptStateError`), never skipped. A full disk
is one :class:`~mlrecipe.errors.DiskFullError`: each release keeps a small reserve file whose space lets the record
of the failure be written when the disk fills (:data:`RESERVE_FILE`).
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe.config import mlrecipe_home, release_dir
from mlrecipe.errors import CorruptStateError, DiskFullError, LinkedPathError, MlrecipeError
from mlrecipe.process_identity import alive, identity, ticks_from_epoch
from mlrecipe.states import StepState

STATE_FILE = "state.json"
RESERVE_FILE = ".state.reserve"  #: space set aside in each release directory for the record of a full disk
RESERVE_BYTES = 256 * 1024
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(where: str | os.PathLike[str], address: str, recorded: bool) -> DiskFullError:
    """The one-line error of a full disk met while writing ``where`` for release ``address``."""
    told = "its state was recorded" if recorded else "its last state may not be recorded"
    return DiskFullError(f"the disk is full: no space left to write {where} (release {address}; {told}); free "
                         f"space there, then run 'mlrecipe resume {address}'")


def check_no_links(path: Path) -> None:
    """Refuse (:class:`LinkedPathError`) when ``path``, or a directory between ``$MLRECIPE_HOME`` and it, is a
    symbolic link; ``path`` need not exist."""
    home = mlrecipe_home()
    try:
        parts = path.relative_to(home).parts
    except ValueError:
        raise LinkedPathError(f"{path} is not under MLRECIPE_HOME ({home})") from None
    current = home
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise LinkedPathError(f"{current} is a symbolic link (to {os.readlink(current)}): mlrecipe does not "
                                  f"write or delete through links under MLRECIPE_HOME; remove the link")


def check_tree_has_no_links(directory: Path) -> None:
    """:func:`check_no_links` for ``directory`` and everything under it (a release's logs and step files)."""
    check_no_links(directory)
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            if os.path.islink(os.path.join(root, name)):
                check_no_links(Path(root) / name)


def _write_atomically(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file (fsync, rename); the temporary file never outlives a failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _keep_reserve(directory: Path) -> None:
    """Set :data:`RESERVE_BYTES` aside in ``directory`` unless already done (quietly not, when space is short)."""
    reserve = directory / RESERVE_FILE
    if reserve.exists():
        return
    try:
        fd = os.open(reserve, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        reserve.unlink(missing_ok=True)
    finally:
        os.close(fd)


@dataclass
class StepRecord:
    """What is known of one step of a release."""

    name: str
    chart: str
    state: StepState = StepState.PENDING
    hash: str = ""
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    message: str = ""
    handle: dict[str, Any] = field(default_factory=dict)  #: the backend's typed handle, as JSON
    url: str | None = None  #: a serving step's URL once it was ready
    outputs: dict[str, str] = field(default_factory=dict)  #: typed outputs of the finished step (model_artifacts, ...)
    progress: dict[str, Any] | None = None  #: the last progress it reported (:class:`mlrecipe.metrics.Progress`)
    matrix: dict[str, Any] | None = None  #: a matrix step's combination (matrix key -> value)
    backend: str | None = None  #: the backend it ran on (``None`` in records of older versions: the release's)
    log_file: str | None = None  #: its nodes' log file, ``{rank}`` for the rank (``logs`` reads it once it ended)

    def __post_init__(self) -> None:
        self.state = StepState(self.state)


@dataclass
class ReleaseRecord:
    """The state of one release: its inputs (to resume), its steps and who drives it."""

    release: str
    namespace: str
    backend: str
    inputs: dict[str, Any]
    state: StepState = StepState.PENDING
    steps: dict[str, StepRecord] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    needs: dict[str, list[str]] = field(default_factory=dict)  #: step -> the steps it waits for
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    driver_pid: int | None = None
    driver_started: int | None = None  #: with ``driver_pid`` the driver's identity (:mod:`mlrecipe.process_identity`)
    driver_created: float | None = None  #: records of earlier versions: the driver's start in epoch seconds (psutil's)
    source: Path | None = field(default=None, init=False, repr=False, compare=False)  #: the file it was read from

    def __post_init__(self) -> None:
        self.state = StepState(self.state)

    @property
    def address(self) -> str:
        return f"{self.backend}://{self.namespace}/{self.release}"

    @property
    def directory(self) -> Path:
        """The release's directory: where its record was read from, else where its names place it."""
        return self.source.parent if self.source is not None else release_dir(self.backend, self.namespace,
                                                                               self.release)

    def backend_of(self, step: StepRecord) -> str:
        """The backend ``step`` ran on: its own, or the release's."""
        return step.backend or self.backend

    def set_driver(self, pid: int | None) -> None:
        """Record process ``pid`` (None: no process) as the one that drives this release, by its identity
        ``[pid, start ticks]``."""
        ident = identity(pid) if pid is not None else None
        self.driver_pid = ident[0] if ident is not None else None
        self.driver_started = ident[1] if ident is not None else None
        self.driver_created = None

    def driver(self) -> list[int] | None:
        """The driver's identity ``[pid, start ticks]`` (from ``driver_created`` in a record of an earlier version;
        a record with neither stands for whatever process has the pid now), None when no process drives it."""
        if self.driver_pid is None:
            return None
        if self.driver_started is not None:
            return [self.driver_pid, self.driver_started]
        if self.driver_created is not None:
            try:
                return [self.driver_pid, ticks_from_epoch(self.driver_created)]
            except (OSError, ValueError):
                return None
        return identity(self.driver_pid)

    def driver_alive(self) -> bool:
        """Whether the CLI process that drives this release is still alive (one that exited but that its parent has
        not reaped yet, a zombie, is not)."""
        return alive(self.driver())

    def effective_state(self) -> StepState:
        """The state, with a running release whose driver died shown as ``interrupted``."""
        if self.state.active and not self.driver_alive():
            return StepState.INTERRUPTED
        return self.state

    def step_state(self, step: StepRecord) -> StepState:
        """A step's state as it stands: a step left pending or running by a driver that died is ``interrupted``."""
        if step.state.active and self.effective_state() is StepState.INTERRUPTED:
            return StepState.INTERRUPTED
        return step.state

    def save(self) -> None:
        """Write the record atomically (write a temporary file, fsync, rename), never through a symbolic link.

        On a full disk the release's reserve is given up so that this record (which says what failed) is still
        written, and :class:`DiskFullError` is raised either way.
        """
        self.updated = time.time()
        directory = self.directory
        check_no_links(directory / STATE_FILE)
        directory.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "source"}
        text = json.dumps(data, indent=2, sort_keys=True)
        try:
            _write_atomically(directory / STATE_FILE, text)
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise MlrecipeError(f"cannot write the state of release {self.address} in {directory}: "
                                    f"{exc.strerror or exc}") from None
            self._save_on_full_disk(directory, text)
        _keep_reserve(directory)

    def _save_on_full_disk(self, directory: Path, text: str) -> None:
        reserve = directory / RESERVE_FILE
        recorded = reserve.exists()
        reserve.unlink(missing_ok=True)
        if recorded:
            try:
                _write_atomically(directory / STATE_FILE, text)
            except OSError:
                recorded = False
        raise disk_full_error(directory, self.address, recorded)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseRecord:
        steps = {k: StepRecord(**v) for k, v in data.pop("steps", {}).items()}
        return cls(steps=steps, **data)


def corrupt_error(path: Path, reason: str) -> CorruptStateError:
    """The error for the unreadable record ``path`` (``releases/<backend>/<namespace>/<release>/state.json``)."""
    backend, namespace, release = path.parts[-4:-1]
    return CorruptStateError(
        f"the state record of release {backend}://{namespace}/{release} is corrupt ({reason}): {path}. To recover, "
        f"stop by hand what the release may still run, then move {path.parent} away (or delete it) and run the "
        "release again")


def read_record(path: Path) -> ReleaseRecord:
    """The record in ``path``; :class:`CorruptStateError` when it is not one (truncated, not JSON, wrong fields).
    Under ``$MLRECIPE_HOME/releases`` its backend, namespace and release are those of its directory."""
    try:
        record = ReleaseRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        reason = "not valid JSON" if isinstance(exc, json.JSONDecodeError) else f"not a release record: {exc}"
        raise corrupt_error(path, reason) from None
    except OSError as exc:
        raise corrupt_error(path, f"unreadable: {exc.strerror or exc}") from None
    if path.parent.parent.parent.parent == mlrecipe_home() / "releases":  # the directory names the release,
        record.backend, record.namespace, record.release = path.parts[-4:-1]  # never what a planted record says
    record.source = path
    return record


def load_record(backend: str, namespace: str, release: str) -> ReleaseRecord | None:
    """The record of one release, ``None`` when it has none; :class:`CorruptStateError` when it is unreadable."""
    path = release_dir(backend, namespace, release) / STATE_FILE
    if not path.exists():
        return None
    return read_record(path)


def scan_records() -> tuple[list[ReleaseRecord], list[tuple[Path, CorruptStateError]]]:
    """Every release with a state record, any backend and namespace; and the unreadable records, by path."""
    root = mlrecipe_home() / "releases"
    records: list[ReleaseRecord] = []
    corrupt: list[tuple[Path, CorruptStateError]] = []
    for path in sorted(root.glob(f"*/*/*/{STATE_FILE}")):
        try:
            records.append(read_record(path))
        except CorruptStateError as exc:
            corrupt.append((path, exc))
    return records, corrupt


def all_records() -> list[ReleaseRecord]:
    """Every readable release record, any backend and namespace."""
    return scan_records()[0]


def find_records(release: str, namespace: str | None = None, backend: str | None = None) -> list[ReleaseRecord]:
    """Records named ``release``, optionally narrowed by namespace and backend.

    Raises :class:`CorruptStateError` when a record that would match (by its directory) cannot be read.
    """
    records, corrupt = scan_records()
    for path, exc in corrupt:
        b, ns, name = path.parts[-4:-1]
        if name == release and namespace in (None, ns) and backend in (None, b):
            raise exc
    return [
        r
        for r in records
        if r.release == release
        and (namespace is None or r.namespace == namespace)
        and (backend is None or r.backend == backend)
    ]
