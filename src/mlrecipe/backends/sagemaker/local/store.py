"""Where local SageMaker mode keeps its resources: one JSON record per resource under a root, shared by processes.

Layout under ``root``: ``training-jobs/<name>/job.json`` (+ ``pids.json``, ``logs/``, ``hosts/algo-N/``),
``models/<name>.json``, ``endpoint-configs/<name>.json``, ``endpoints/<name>/endpoint.json``. Records are
updated under an exclusive ``flock`` and replaced atomically, so clients in several processes and a job's
supervisor see one consistent state. Times are stored as epoch seconds.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

ACCOUNT = "000000000000"
REGION = "local"
KINDS = {"training-job": "training-jobs", "model": "models", "endpoint-config": "endpoint-configs",
         "endpoint": "endpoints"}


def arn(kind: str, name: str) -> str:
    """The ARN SageMaker would give ``name`` (it lowercases names in ARNs)."""
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:{kind}/{name.lower()}"


def client_error(code: str, message: str, operation: str) -> Exception:
    """The ``botocore.exceptions.ClientError`` SageMaker's API would raise."""
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)


def not_found(operation: str) -> Exception:
    return client_error("ValidationException", "Requested resource not found.", operation)


def when(epoch: float | None) -> dt.datetime | None:
    """A stored time as boto3 returns it (an aware datetime)."""
    return None if epoch is None else dt.datetime.fromtimestamp(epoch, tz=dt.timezone.utc)


def write_json(path: Path, data: Any) -> None:
    """Replace ``path`` atomically with ``data`` as JSON."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


class Store:
    """The records of one kind of resource (``training-job``, ``model``, ...) under ``root``."""

    def __init__(self, root: Path, kind: str, nested: bool = False) -> None:
        self.kind = kind
        self.dir = Path(root) / KINDS[kind]
        self.nested = nested

    def path(self, name: str) -> Path:
        return self.dir / name / f"{self.kind}.json" if self.nested else self.dir / f"{name}.json"

    def home(self, name: str) -> Path:
        """The directory that holds a nested resource's files."""
        return self.dir / name

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return None

    def names(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        if self.nested:
            return sorted(p.parent.name for p in self.dir.glob(f"*/{self.kind}.json"))
        return sorted(p.stem for p in self.dir.glob("*.json"))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold this kind's lock (creation and every read-modify-write)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def create(self, name: str, record: dict[str, Any]) -> bool:
        """Write a new record; False when ``name`` exists already."""
        with self.locked():
            if self.exists(name):
                return False
            self.path(name).parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path(name), record)
            return True

    def update(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
        """Apply ``change`` to the record under the lock and store it; the new record, or None if it is gone."""
        with self.locked():
            record = self.read(name)
            if record is None:
                return None
            change(record)
            write_json(self.path(name), record)
            return record

    def delete(self, name: str) -> bool:
        with self.locked():
            if not self.exists(name):
                return False
            self.path(name).unlink()
            return True


class Record(Protocol):
    """A typed record kept as JSON: a training job's or an endpoint's."""

    @property
    def name(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Record)


class TypedStore(Generic[R]):
    """The records of one kind as typed records (``record_type.from_json`` / ``to_json``) over a :class:`Store`."""

    def __init__(self, store: Store, record_type: Any) -> None:
        self.store = store
        self.record_type = record_type

    def home(self, name: str) -> Path:
        return self.store.home(name)

    def names(self) -> list[str]:
        return self.store.names()

    def locked(self) -> contextlib.AbstractContextManager[None]:
        return self.store.locked()

    def read(self, name: str) -> R | None:
        data = self.store.read(name)
        return self.record_type.from_json(data) if data is not None else None  # type: ignore[no-any-return]

    def create(self, record: R) -> bool:
        """Write a new record; False when one of its name exists already."""
        return self.store.create(record.name, record.to_json())

    def update(self, name: str, change: Callable[[R], None]) -> R | None:
        """Apply ``change`` under the lock and store it; the new record, or None if it is gone."""
        out: list[R] = []

        def typed(data: dict[str, Any]) -> None:
            record = self.record_type.from_json(data)
            change(record)
            data.clear()
            data.update(record.to_json())
            out.append(record)

        return out[0] if self.store.update(name, typed) is not None else None
