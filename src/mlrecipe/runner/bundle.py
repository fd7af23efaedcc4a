"""A release's debug bundle: one ``.tar.gz`` with what is needed to reconstruct a failure after the fact.

It holds the state record, every step's plan as ``template`` prints it (made again now from the recorded inputs),
every file of each step's directory (every node's and rank's log, and what the step runtime writes beside them:
the watchdog's stacks, the fabric check's figures), what each step's backend still holds of it (a backend with
:class:`~mlrecipe.backends.base.CollectsDebugRecords`: pod logs and events, ``scontrol show job`` and ``sacct``,
DescribeTrainingJob and its log streams), the versions on this machine, and each step's environment. Every file is
scrubbed before it is written: the values of the credentials mlrecipe knows of (the recipes', the environment's) and
anything of a credential's form (:func:`mlrecipe.credentials.redact_text`) are masked. ``MANIFEST.txt`` lists every
file and what could not be collected, with why.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import CollectsDebugRecords
from mlrecipe.credentials import MASK, is_secret, redact_env, redact_text
from mlrecipe.errors import MlrecipeError
from mlrecipe.runner.recorded_inputs import SECRETS_KEY, credentials, restore
from mlrecipe.runner.state import STATE_FILE, ReleaseRecord
from mlrecipe.runner.step_backends import StepBackends
from mlrecipe.runner.versions import nccl_in_logs, versions_text
from mlrecipe.spec.load import ReleaseSpec

MANIFEST = "MANIFEST.txt"
MAX_FILE_BYTES = 32 * 1024 * 1024  #: a larger file keeps its last part (a log's end is where a failure is)
MIN_SECRET_CHARS = 4  #: shorter credential values are not searched for (they would mask ordinary text)


def scrubber(secrets: set[str]) -> Callable[[bytes], bytes]:
    """A function that masks in a file's bytes each of ``secrets`` (longest first) and, in text, anything of a
    credential's form."""
    known = sorted((s.encode() for s in secrets if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True)

    def scrub(data: bytes) -> bytes:
        for secret in known:
            data = data.replace(secret, MASK.encode())
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data
        return redact_text(text).encode("utf-8")

    return scrub


def known_secrets(spec: ReleaseSpec | None, environ: dict[str, str]) -> set[str]:
    """The credential values mlrecipe can know of: the recipes' (env entries, credential-named keys) and this
    process's environment's."""
    found = {value for name, value in environ.items() if is_secret(name, value)}
    return found | (set(credentials(spec)) if spec is not None else set())


@dataclass
class Bundle:
    """A bundle being written: each file is scrubbed and added to the gzipped tar ``tar`` as it comes (one file in
    memory at a time, whatever the number of ranks); :meth:`add_manifest` adds ``MANIFEST.txt``, the last member."""

    path: Path
    root: str  #: the folder every member is under
    scrub: Callable[[bytes], bytes]
    files: list[tuple[str, int, str]] = field(default_factory=list)  #: (name, size, what it is)
    missing: list[tuple[str, str]] = field(default_factory=list)  #: (what, why it could not be collected)
    nccl: list[tuple[str, str]] = field(default_factory=list)  #: (NCCL version, the log that reports it)
    made: float = field(default_factory=time.time)
    tar: tarfile.TarFile | None = field(default=None, repr=False)

    @property
    def tmp(self) -> Path:
        return self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.files]

    def _put(self, name: str, data: bytes) -> None:
        assert self.tar is not None, "collect opens the tar"
        info = tarfile.TarInfo(f"{self.root}/{name}")
        info.size, info.mtime, info.mode = len(data), int(self.made), 0o644
        self.tar.addfile(info, io.BytesIO(data))

    def add(self, name: str, data: bytes | str, what: str) -> None:
        """Scrub ``data`` and add it as ``name``."""
        clean = self.scrub(data.encode("utf-8") if isinstance(data, str) else data)
        if name.endswith(".log"):
            self.nccl += nccl_in_logs([(name, clean)])
        self._put(name, clean)
        self.files.append((name, len(clean), what))

    def miss(self, what: str, why: str) -> None:
        self.missing.append((what, redact_text(why)))

    def manifest(self, address: str) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.made))
        lines = [f"mlrecipe debug bundle of release {address}, made {when}.",
                 "Credential values mlrecipe knows of (the recipes', the environment's) and anything of a "
                 f"credential's form are masked as {MASK} in every file.", "", "Files:"]
        lines += [f"  {name}  ({size} bytes)  {what}" for name, size, what in self.files]
        lines += ["", "Not collected:"] + ([f"  {what}: {why}" for what, why in self.missing] or ["  (nothing)"])
        return "\n".join(lines) + "\n"

    def add_manifest(self, address: str) -> None:
        self._put(MANIFEST, self.manifest(address).encode())


def recorded_spec(record: ReleaseRecord, environ: dict[str, str]) -> tuple[ReleaseSpec, list[str]]:
    """The release's spec from its recorded inputs, as they are now, and the variables of the credentials given with
    ``--set`` that ``environ`` does not give back: those stay the ``${NAME}`` they were recorded as (they are not on
    disk)."""
    from mlrecipe.runner.release import spec_from_inputs

    unset = sorted({m["env"] for m in record.inputs.get(SECRETS_KEY) or [] if m["env"] not in environ})
    if unset:
        return spec_from_inputs({k: v for k, v in record.inputs.items() if k != SECRETS_KEY}), unset
    return spec_from_inputs(restore(record.inputs, environ)), []


def _read_tail(path: Path) -> tuple[bytes, bool]:
    """The file's bytes, or its last :data:`MAX_FILE_BYTES` (and True) when it is larger."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= MAX_FILE_BYTES:
            return fh.read(), False
        fh.seek(size - MAX_FILE_BYTES)
        return fh.read(), True


def _files_under(directory: Path) -> Iterator[Path]:
    """Regular files under ``directory``, sorted; symbolic links are not followed."""
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if not path.is_symlink() and path.is_file():
                yield path


@dataclass
class Collector:
    """Collects one release's bundle; ``say`` reports progress."""

    record: ReleaseRecord
    backends: StepBackends
    say: Callable[[str], None]
    environ: dict[str, str]
    spec: ReleaseSpec | None = None
    unset: list[str] = field(default_factory=list)  #: credentials given with --set that the plans show as ${NAME}
    bundle: Bundle = field(init=False)

    def collect(self, step: str | None, path: Path) -> Bundle:
        """Write the bundle of the whole release, or of ``step`` only (with the whole release's plan and state), to
        ``path``; nothing is left there on a failure."""
        spec_error = ""
        try:
            self.spec, self.unset = recorded_spec(self.record, self.environ)
        except (MlrecipeError, KeyError) as exc:
            spec_error = f"the release's recorded inputs cannot be loaded now: {exc}"
        root = path.name.removesuffix(".gz").removesuffix(".tar").removesuffix(".tgz")
        self.bundle = Bundle(path, root, scrubber(known_secrets(self.spec, self.environ)))
        steps = [step] if step else [n for n in self.record.order if n in self.record.steps]
        try:
            with tarfile.open(self.bundle.tmp, "w:gz") as self.bundle.tar:
                self._state()
                self._plans(spec_error)
                for name in steps:
                    self._step_files(name)
                    self._backend_records(name)
                    self._environment(name, spec_error)
                self._process_environment()
                self._versions()
                self.bundle.add_manifest(self.record.address)
            self.bundle.tmp.replace(path)
        finally:
            self.bundle.tmp.unlink(missing_ok=True)
        return self.bundle

    def _state(self) -> None:
        self.say("state record")
        directory = self.record.directory
        self.bundle.add(STATE_FILE, (directory / STATE_FILE).read_bytes(), "the release's state record")
        for path in sorted(directory.iterdir()):
            if path.is_file() and not path.is_symlink() and not path.name.startswith(".") and path.name != STATE_FILE:
                data, cut = _read_tail(path)
                self.bundle.add(f"release/{path.name}", data, "a file of the release's directory"
                                + (" (its last part)" if cut else ""))

    def _plans(self, spec_error: str) -> None:
        """Every step's plan, exactly as ``template`` (``--dry-run``) prints it."""
        from mlrecipe.runner.progress import QuietDisplay
        from mlrecipe.runner.release import ReleaseRunner

        self.say("plans (as 'template' prints them)")
        if self.spec is None:
            self.bundle.miss("plans/template.txt", spec_error)
            return
        try:
            runner = ReleaseRunner(self.spec, self.backends.default, {}, QuietDisplay(),
                                   backend_options=self.backends.options)
            text = runner.materialize()
        except MlrecipeError as exc:
            self.bundle.miss("plans/template.txt", f"the steps could not be planned now: {exc}")
            return
        self.bundle.add("plans/template.txt", text, "every step's plan as 'mlrecipe template' prints it, made now "
                        "from the recorded inputs")
        changed = [s.name for s in self.spec.steps if s.name in self.record.steps
                   and self.record.steps[s.name].hash not in ("", s.content_hash)]
        if changed:
            given = (f", or take a credential given with --set, which is not on disk (export {', '.join(self.unset)} "
                     "before debug-bundle to tell)") if self.unset else ""
            self.bundle.miss("plans of the steps as they ran", f"the recipes of step(s) {', '.join(changed)} changed "
                             f"since they ran{given}: plans/template.txt shows them as they are now")

    def _step_files(self, name: str) -> None:
        directory = self.record.directory / "steps" / name
        files = list(_files_under(directory)) if directory.is_dir() else []
        self.say(f"step {name}: {len(files)} file(s) of its directory (logs of every node and rank)")
        if not files:
            self.bundle.miss(f"steps/{name}/", f"the step has no files in {directory} (it never started here)")
        for path in files:
            rel = path.relative_to(directory).as_posix()
            try:
                data, cut = _read_tail(path)
            except OSError as exc:
                self.bundle.miss(f"steps/{name}/{rel}", f"unreadable: {exc.strerror or exc}")
                continue
            what = "a node's log" if rel.endswith(".log") else "a file of the step's directory"
            self.bundle.add(f"steps/{name}/{rel}", data, what + (" (its last part)" if cut else ""))

    def _backend_records(self, name: str) -> None:
        rec = self.record.steps.get(name)
        if rec is None or not rec.handle:
            return
        backend = self.record.backend_of(rec)
        try:
            impl = self.backends.named(backend)
        except MlrecipeError as exc:
            self.bundle.miss(f"backend/{name}/", f"backend {backend} cannot be made: {exc}")
            return
        if not issubclass(type(impl), CollectsDebugRecords):
            return  # everything such a backend has of a step is in the step's directory
        self.say(f"step {name}: asking {backend} what it still holds")
        assert isinstance(impl, CollectsDebugRecords)
        try:
            records = impl.debug_records(impl.load_handle(rec.handle))
        except Exception as exc:  # the contract says it does not raise; a bundle is made all the same
            self.bundle.miss(f"backend/{name}/", f"{backend} could not be asked: {exc}")
            return
        for found in records:
            where = f"backend/{name}/{found.name}"
            if found.text is None:
                self.bundle.miss(where, found.missing)
            else:
                self.bundle.add(where, found.text, f"what {backend} holds of the step")

    def _environment(self, name: str, spec_error: str) -> None:
        """The env the step's recipe gives its nodes (masked); what mlrecipe adds per node is in the plan."""
        step = next((s for s in self.spec.steps if s.name == name), None) if self.spec is not None else None
        if step is None:
            self.bundle.miss(f"environment/{name}.env", spec_error or "the step is not in the release's inputs now")
            return
        try:
            entries = [*(step.recipe.mpirun.env if step.recipe.mpirun is not None else []), *step.block.env]
        except (MlrecipeError, AttributeError, KeyError) as exc:
            self.bundle.miss(f"environment/{name}.env", f"the step's env cannot be read: {exc}")
            return
        env = redact_env({e.name: str(e.value) for e in entries})
        self.bundle.add(f"environment/{name}.env", _env_text(env, "the recipe's env of step " + name
                                                             + " (what mlrecipe adds per node: plans/template.txt)"),
                        "the step's env, credentials masked")

    def _process_environment(self) -> None:
        self.bundle.add("environment/debug-bundle-process.env",
                        _env_text(redact_env(self.environ), "the environment of the process that made this bundle "
                                  "(local and Slurm nodes inherit the environment of the 'mlrecipe run' that "
                                  "started them, often the same shell)"),
                        "this process's environment, credentials masked")

    def _versions(self) -> None:
        self.say("versions")
        text, why = versions_text(self.bundle.nccl)
        self.bundle.add("versions.txt", text, "mlrecipe, Python, torch, NCCL and driver versions where known")
        if why:
            self.bundle.miss("NVIDIA driver version", why)


def _env_text(env: dict[str, Any], title: str) -> str:
    return f"# {title}\n" + "".join(f"{k}={v}\n" for k, v in sorted(env.items()))


def collect(record: ReleaseRecord, backends: StepBackends, step: str | None, path: Path,
            say: Callable[[str], None], environ: dict[str, str]) -> Bundle:
    """Write the debug bundle of ``record`` (of its step ``step`` only, when given) to ``path``; what it holds and
    what it misses."""
    return Collector(record, backends, say, environ).collect(step, path)
