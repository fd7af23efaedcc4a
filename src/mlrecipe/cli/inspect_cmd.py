"""Commands that read: validate, schema, status, list, logs."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlrecipe.cli.address import parse_address
from mlrecipe.cli.output import emit_json, fail, print_error, print_spec_error
from mlrecipe.errors import BackendError, CorruptStateError, ExitCode, MlrecipeError, SpecError

if TYPE_CHECKING:
    from mlrecipe.runner.state import ReleaseRecord
    from mlrecipe.runner.step_backends import StepBackends
    from mlrecipe.spec.load import ReleaseSpec


def validate(file: Path, chart: str | None, out: str, backend: str | None = None,
             opts: list[str] | None = None) -> ExitCode:
    """Validate a pipeline (and the recipes it names) or a recipe for ``chart``; with a backend, plan it too."""
    from mlrecipe.cli import lifecycle

    lifecycle.skip_pydantic_plugins()
    from mlrecipe.spec.load import is_pipeline_file, load_pipeline, load_step_release

    try:
        if chart is None and is_pipeline_file(file):
            spec = load_pipeline(file)
        elif chart is None:
            raise SpecError.single(str(file), "this is a recipe: name its chart with --chart CHART")
        else:
            spec = load_step_release("validate", chart, [str(file)])
        planned = _plan_all(spec, backend or spec.backend, opts or [])
        if planned is None and any(s.backend for s in spec.steps):  # a hybrid pipeline: each step on its own
            planned = _plan_all(spec, "local", opts or [])
    except SpecError as exc:
        if out == "json":
            emit_json({"valid": False, "errors": [vars(i) for i in exc.issues]})
        else:
            print_spec_error(exc)
        return ExitCode.USAGE
    warnings = [w for s in spec.steps for w in s.warnings]
    needs = spec.dependencies()
    if out == "json":
        emit_json({"valid": True, "backend": planned, "warnings": [vars(w) for w in warnings],
                   "steps": [{"name": s.name, "chart": s.chart.name, "backend": s.backend,
                              "depends_on": sorted(needs[s.name]),
                              **({"matrix": s.matrix.as_dict()} if s.matrix else {})} for s in spec.steps]})
    else:
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        where = f", planned for backend {planned}" if planned else ""
        print(f"{file}: valid ({len(spec.steps)} step(s): {', '.join(s.name for s in spec.steps)}{where})")
    return ExitCode.OK


def _plan_all(spec: ReleaseSpec, backend: str | None, opts: list[str]) -> str | None:
    """Plan every step on ``backend`` as a dry run would (nothing written); problems raise ``SpecError``."""
    if backend is None:
        return None
    from mlrecipe.cli.execute import _backends
    from mlrecipe.errors import UserError
    from mlrecipe.runner.progress import QuietDisplay
    from mlrecipe.runner.release import ReleaseRunner

    try:
        default, others = _backends(None if backend == spec.backend else backend, spec.backend, opts, spec.backend_at)
    except UserError as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError.single("--backend", str(exc)) from None
    # an unknown step backend: its file and line
    runner = ReleaseRunner(spec, default, {}, QuietDisplay(), backend_options=others)
    problems = runner.problems()
    if problems:
        raise SpecError(problems)
    runner.materialize()
    names = sorted({runner.backends.of(s).name for s in spec.steps})
    if names == [backend]:
        return backend
    return ", ".join(f"{n} ({', '.join(s.name for s in spec.steps if runner.backends.of(s).name == n)})"
                     for n in names)


def schema(kind: str) -> ExitCode:
    """Print the JSON Schema of a recipe, a pipeline or the config file."""
    from mlrecipe.backends.config_schema import config_schema
    from mlrecipe.spec.pipeline import Pipeline
    from mlrecipe.spec.recipe import Recipe

    schemas = {"recipe": Recipe.model_json_schema, "pipeline": Pipeline.model_json_schema, "config": config_schema}
    if kind not in schemas:
        return fail(f"unknown schema '{kind}': use recipe, pipeline or config")
    print(json.dumps(schemas[kind](), indent=2))
    return ExitCode.OK


def options(backend: str | None) -> ExitCode:
    """Print each backend's options: name, type, default and description."""
    from mlrecipe.backends.registry import BACKENDS, backend_class

    try:
        names = [backend] if backend else sorted(BACKENDS)
        classes = [backend_class(n) for n in names]
    except MlrecipeError as exc:
        return print_error(exc)
    for name, cls in zip(names, classes, strict=True):
        print(f"{name} options (config file section '{name}:', or --backend-opt key=value):")
        for key, info in cls.options_type.model_fields.items():
            default = info.get_default(call_default_factory=True)
            ann = info.annotation
            kind = ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")
            print(f"  {key} ({kind}, default {default!r})")
            print(f"      {info.description}")
    return ExitCode.OK


def _progress(figures: dict[str, Any]) -> str:
    from mlrecipe.metrics import Progress  # here: only a running step's record has figures

    return str(Progress(**figures))


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


@dataclass(frozen=True)
class ServerCheck:
    """A serving step's server as ``status`` found it: ``up``, ``unhealthy`` (its processes run, its health URL does
    not answer 2xx), ``gone`` (its processes ended) or ``unknown``, and why (the log's last error line)."""

    word: str
    reason: str | None = None

    def __str__(self) -> str:
        return f"{self.word} ({self.reason})" if self.reason else self.word


def _server_checks(record: ReleaseRecord, backends: StepBackends) -> dict[str, ServerCheck]:
    """For each serving step of ``record``: whether its server is up and healthy (asked of the step's backend)."""
    from mlrecipe.backends.base import ReleaseContext, StepState
    from mlrecipe.logtail import last_error

    serving = [s for s in record.steps.values() if s.state is StepState.SERVING and s.handle]
    ctx = ReleaseContext(record.release, record.namespace, record.backend, record.directory)
    out = {}
    for s in serving:
        try:
            impl = backends.named(record.backend_of(s))
            handle = impl.load_handle(s.handle)
            alive = impl.handle_alive(handle)
            problem = impl.server_health(handle) if alive else None
            if alive and problem is None:
                out[s.name] = ServerCheck("up")
                continue
            logged = last_error(impl.log_path(ctx, s.name))
            out[s.name] = ServerCheck("unhealthy", f"{problem}: {logged}" if logged else problem) if alive \
                else ServerCheck("gone", logged)
        except (BackendError, MlrecipeError) as exc:
            out[s.name] = ServerCheck("unknown", str(exc))
    return out


def _live_progress(record: ReleaseRecord, backends: StepBackends) -> None:
    """Refresh the progress of ``record``'s running steps from their metrics files (in place)."""
    from mlrecipe.backends.base import ReleaseContext, StepState
    from mlrecipe.metrics import read_progress

    running = [s for s in record.steps.values() if s.state is StepState.RUNNING]
    ctx = ReleaseContext(record.release, record.namespace, record.backend, record.directory)
    for step in running:
        progress = read_progress(backends.named(record.backend_of(step)).metrics_path(ctx, step.name))
        if progress is not None:
            step.progress = progress.to_json()


@dataclass(frozen=True)
class LiveNote:
    """What a running step's backend says about it now (``note``), or why it could not be asked (``error``: the
    recorded state is shown)."""

    note: str | None = None
    error: str | None = None

    def __str__(self) -> str:
        return self.note or f"live status unavailable ({self.error}); showing the recorded state"


def _live_notes(record: ReleaseRecord, backends: StepBackends) -> dict[str, LiveNote]:
    """For each running step of ``record`` with a handle: what its backend says about it now (``live_note``)."""
    from mlrecipe.backends.base import StepState

    out = {}
    for s in record.steps.values():
        if s.state is not StepState.RUNNING or not s.handle:
            continue
        try:
            impl = backends.named(record.backend_of(s))
            note = impl.live_note(impl.load_handle(s.handle))
        except MlrecipeError as exc:
            out[s.name] = LiveNote(error=str(exc))
            continue
        if note:
            out[s.name] = LiveNote(note)
    return out


def status(release: str | None, namespace: str | None, backend: str | None, out: str,
           opts: list[str]) -> ExitCode:
    """Show one release in detail (asking the backend whether its servers are up and what its running steps do
    now), or all in a table."""
    from mlrecipe.cli.execute import check_step, record_backends, summary
    from mlrecipe.runner.state import find_records, scan_records

    corrupt: list[tuple[Path, CorruptStateError]] = []
    checks: dict[tuple[str, str, str], dict[str, ServerCheck]] = {}
    notes: dict[tuple[str, str, str], dict[str, LiveNote]] = {}
    try:
        if release is None:
            records, corrupt = scan_records()
        else:
            addr = parse_address(release, namespace, backend)
            records = find_records(addr.release, addr.namespace, addr.backend)
            if not records:
                return fail(f"release '{release}' not found (see 'mlrecipe list')", ExitCode.FAILED)
            for r in records:
                check_step(r, addr.step)
            for r in records:  # one backend per release answers both questions
                if not opts and not _has_live_steps(r):
                    continue  # a finished release: the record says all, no backend is asked
                backends = record_backends(r, opts)
                checks[(r.backend, r.namespace, r.release)] = _server_checks(r, backends)
                notes[(r.backend, r.namespace, r.release)] = _live_notes(r, backends)
                _live_progress(r, backends)
    except MlrecipeError as exc:
        return print_error(exc)
    if out == "json":
        docs = []
        for r in records:
            doc = summary(r)
            for step in doc["steps"]:
                check = checks.get((r.backend, r.namespace, r.release), {}).get(step["name"])
                if check is not None:
                    step["server"] = check.word
                    if check.reason:
                        step["server_reason"] = check.reason
                fabric = _fabric_figures(r, step["name"])
                if fabric:
                    step["fabric"] = fabric
                told = notes.get((r.backend, r.namespace, r.release), {}).get(step["name"])
                if told is not None:
                    step.update({"live": told.note} if told.note else {"live_error": told.error})
            docs.append(doc)
        docs += [{"address": _corrupt_address(path), "state": "corrupt", "error": str(exc)} for path, exc in corrupt]
        emit_json(docs)
        return ExitCode.OK
    if not records and not corrupt:
        print("no releases")
        return ExitCode.OK
    for path, _exc in corrupt:
        print(f"{_corrupt_address(path)}  corrupt  (unreadable {path}; 'mlrecipe status' on it says how to recover)")
    for r in records:
        print(f"{r.backend}://{r.namespace}/{r.release}  {r.effective_state()}  updated {_when(r.updated)}")
        if release is None:
            continue
        live = checks.get((r.backend, r.namespace, r.release), {})
        now = notes.get((r.backend, r.namespace, r.release), {})
        for name in r.order:
            s = r.steps.get(name)
            needs = f"  needs {', '.join(r.needs[name])}" if r.needs.get(name) else ""
            if s is None:
                print(f"  {name:<20} {'pending':<12} {'':<10}{needs}")
                continue
            extra = f"  {_one_line(s.message, r.release, name)}" if s.message else ""
            url = f"  {s.url}" if s.url else ""
            server = f"  [server {live[name]}]" if name in live else ""
            progress = f"  [{_progress(s.progress)}]" if s.progress else ""
            note = f"  [{now[name]}]" if name in now else ""
            fabric_note = _fabric_line(_fabric_figures(r, name))
            print(f"  {name:<20} {r.step_state(s).value:<12} {r.backend_of(s):<10} {s.chart}{needs}{url}{server}"
                  f"{progress}{note}{fabric_note}{extra}")
    return ExitCode.OK


def _fabric_figures(record: ReleaseRecord, step: str) -> list[dict]:
    """The fabric check's figures of every node of ``step`` (``fabric-node-<rank>.json`` in its log directory)."""
    log_dir = Path(record.directory) / "steps" / step if record.directory else None
    if log_dir is None or not any(log_dir.glob("fabric-node-*.json")):
        return []  # no check ran: the step runtime's module is not loaded for nothing
    from mlrecipe.runtime.step_runtime import read_fabric_figures

    return read_fabric_figures(log_dir)


def _fabric_line(figures: list[dict]) -> str:
    """The fabric check on ``status``'s step line: transport, the lowest node's best bus bandwidth, its ratio."""
    if not figures:
        return ""
    worst = min(figures, key=lambda f: f.get("busbw_gbs", 0.0))
    ratio = f", {worst['ratio']:.3f} of {worst['node_type']}" if worst.get("ratio") is not None else ""
    return f"  [fabric {worst.get('transport')} busbw {worst.get('busbw_gbs', 0.0):.3f} GB/s{ratio}]"


def _one_line(message: str, release: str, step: str) -> str:
    """A step's message on one line of ``status``: its first line; the rest is in the step's log and in
    ``status -o json``."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return " ".join(lines)
    return f"{lines[0]} (+{len(lines) - 1} line(s): mlrecipe logs {release} {step}, status -o json)"


def _has_live_steps(record: ReleaseRecord) -> bool:
    """Whether a step of ``record`` runs or serves now, so that its backend has something to say."""
    from mlrecipe.states import StepState

    return any(s.state in (StepState.RUNNING, StepState.SERVING) for s in record.steps.values())


def _corrupt_address(path: Path) -> str:
    backend, namespace, release = path.parts[-4:-1]
    return f"{backend}://{namespace}/{release}"


def logs(release: str, step: str | None, follow: bool, rank: int, namespace: str | None, backend: str | None,
         opts: list[str]) -> ExitCode:
    """Print (and follow) the log of node ``rank`` of a step (of an ended step, from the file its record names,
    without asking the backend)."""
    from mlrecipe.cli.execute import one_record

    try:
        record = one_record(release, namespace, backend)
    except MlrecipeError as exc:
        return print_error(exc)
    if record is None:
        return fail(f"release '{release}' not found (see 'mlrecipe list')", ExitCode.FAILED)
    step = step or parse_address(release, namespace, backend).step
    if step is None:
        ran = [n for n in record.order if n in record.steps]
        if not ran:
            return fail(f"release '{release}' has not started a step yet", ExitCode.FAILED)
        step = ran[-1]
    if step not in record.order:
        return fail(f"release '{release}' has no step '{step}' (steps: {', '.join(record.order)})")
    step_record = record.steps.get(step)
    if step_record is not None and step_record.log_file and not step_record.state.active and not opts:
        path = Path(step_record.log_file.format(rank=rank))
    else:
        try:
            path = _backend_log_path(record, step, rank, opts)
        except MlrecipeError as exc:
            return print_error(exc)
    try:
        _check_not_linked(path)
    except MlrecipeError as exc:
        return print_error(exc)
    if not path.exists():
        return fail(f"no log for step '{step}' rank {rank} yet ({path})", ExitCode.FAILED)
    if not follow and path.stat().st_size == 0:
        print(f"note: the log of step '{step}' rank {rank} is empty: it printed nothing ({path})", file=sys.stderr)
    return _print_log(path, record, follow)


def _check_not_linked(path: Path) -> None:
    """A log under ``$MLRECIPE_HOME`` is read only where no symbolic link leads to it (as writes and deletes)."""
    from mlrecipe.config import mlrecipe_home
    from mlrecipe.runner.state import check_no_links

    if path.is_relative_to(mlrecipe_home()):
        check_no_links(path)


def _backend_log_path(record: ReleaseRecord, step: str, rank: int, opts: list[str]) -> Path:
    """The log file of ``rank`` of ``step`` as the step's backend names it (copying it here where it must)."""
    from mlrecipe.backends.base import ReleaseContext
    from mlrecipe.cli.execute import record_backends

    backends = record_backends(record, opts)
    ctx = ReleaseContext(record.release, record.namespace, record.backend, record.directory)
    step_record = record.steps.get(step)
    impl = backends.named(record.backend_of(step_record)) if step_record is not None else backends.default
    return impl.log_path(ctx, step, rank)


def _print_log(path: Path, record: ReleaseRecord, follow: bool) -> ExitCode:
    """Print the log at ``path``; to follow, keep printing while the release's driver lives (exit 2 naming the
    record should it become unreadable)."""
    from mlrecipe.runner.state import find_records

    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            if not follow:
                return ExitCode.OK
            try:
                current = find_records(record.release, record.namespace, record.backend)
            except CorruptStateError as exc:  # records are replaced by rename: never seen half-written
                sys.stdout.buffer.write(fh.read())
                sys.stdout.flush()
                return print_error(exc)
            if not current or not current[0].driver_alive():
                sys.stdout.buffer.write(fh.read())
                sys.stdout.flush()
                return ExitCode.OK
            time.sleep(0.25)
