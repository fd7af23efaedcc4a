"""Commands that run things: install, run, template, resume, uninstall."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from mlrecipe.cli import lifecycle
from mlrecipe.cli.address import parse_address
from mlrecipe.cli.output import emit_json, fail, print_error
from mlrecipe.errors import BackendError, ExitCode, MlrecipeError, ReleaseBusyError, SpecError, UserError

if TYPE_CHECKING:
    from mlrecipe.runner.state import ReleaseRecord
    from mlrecipe.runner.step_backends import AnyBackend, StepBackends


def _backends(name: str | None, spec_backend: str | None, opts: list[str],
              spec_at: tuple[str, int | None, str] | None = None) -> tuple[AnyBackend, dict[str, dict[str, Any]]]:
    """The release's backend by name (command line, then the pipeline's ``backend:``, then the default) with its
    options, and the command line's options of the other backends (``-B <backend>.key=value``) by name; an unknown
    name the pipeline gave is a :class:`SpecError` at ``spec_at`` (its file, line and field)."""
    from mlrecipe.backends.options import parse_backend_opts
    from mlrecipe.backends.registry import DEFAULT_BACKEND, get_backend
    from mlrecipe.errors import SpecError, SpecIssue, UnknownBackendError
    from mlrecipe.runner.step_backends import hint_other_backends, split_options

    chosen = name or spec_backend or DEFAULT_BACKEND
    try:
        own, others = split_options(chosen, parse_backend_opts(opts))
        try:
            return get_backend(chosen, own), others
        except SpecError as exc:
            raise hint_other_backends(exc, chosen) from None
    except UnknownBackendError as exc:
        if name is None and spec_backend is not None and spec_at is not None:
            raise SpecError([SpecIssue(*spec_at, str(exc))]) from None
        raise


def record_backends(record: ReleaseRecord, opts: list[str]) -> StepBackends:
    """The backends of a recorded release (``StepBackends``): its own, with ``opts``, and those its steps ran on
    (``.named(record.backend_of(step))``, with their ``<backend>.key=value`` options)."""
    from mlrecipe.runner.recorded_inputs import recorded_backend_opts
    from mlrecipe.runner.step_backends import StepBackends

    return StepBackends(*_backends(record.backend, None, [*recorded_backend_opts(record.inputs), *opts]))


def summary(record: ReleaseRecord) -> dict[str, Any]:
    """A release record as ``status -o json`` prints it."""
    return {
        "address": f"{record.backend}://{record.namespace}/{record.release}",
        "state": record.effective_state().value,
        "steps": [
            {"name": s.name, "chart": s.chart, "state": record.step_state(s).value, "exit_code": s.exit_code,
             "message": s.message, "url": s.url, "progress": s.progress, "backend": record.backend_of(s),
             "needs": record.needs.get(s.name, []), **({"outputs": s.outputs} if s.outputs else {}),
             **({"matrix": s.matrix} if s.matrix else {})}
            for s in (record.steps[n] for n in record.order if n in record.steps)
        ],
    }


def run_inputs(inputs: dict[str, Any], backend: str | None, opts: list[str], dry_run: bool, force: bool,
               out: str, max_parallel: int = 4, keep_going: bool = False, keep_on_failure: bool = False) -> ExitCode:
    """Validate, then print the plan (dry run) or run the release; return the exit code."""
    lifecycle.skip_pydantic_plugins()
    from mlrecipe.runner.progress import make_display
    from mlrecipe.runner.recorded_inputs import with_backend_opts
    from mlrecipe.runner.release import ReleaseRunner
    from mlrecipe.runner.release_inputs import InstallInputs, release_inputs
    from mlrecipe.runner.state import load_record

    inputs = with_backend_opts(inputs, opts)
    try:
        given = release_inputs(inputs)
        spec = given.load()
        if isinstance(given, InstallInputs) and given.namespace:
            spec = type(spec)(spec.release, given.namespace, spec.steps, spec.backend, spec.source)
        impl, others = _backends(backend, spec.backend, opts, spec.backend_at)
        runner = ReleaseRunner(spec, impl, inputs, make_display("json" if dry_run else out), force=force,
                               max_parallel=max_parallel, keep_going=keep_going, backend_options=others,
                               keep_on_failure=keep_on_failure)
        problems = runner.problems()
        if problems:
            raise SpecError(problems)
        if dry_run:
            print(runner.materialize(), end="")
            return ExitCode.OK
        lifecycle.started()
        code = runner.run()
    except (UserError, ReleaseBusyError) as exc:
        return print_error(exc)
    if out != "json":
        from mlrecipe.cli.sweep_table import print_sweeps

        return print_sweeps(runner, code)
    from mlrecipe.cli import sweep_table

    record = load_record(impl.name, spec.namespace, spec.release)
    found = sweep_table.tables(runner, record)
    if record is not None:
        sweeps = [sweep_table.as_json(t) for t in found]
        emit_json({**summary(record), **({"sweeps": sweeps} if sweeps else {})})
    return sweep_table.check_rank_metric(runner, found, code)


def one_record(release: str, namespace: str | None, backend: str | None) -> ReleaseRecord | None:
    """The one release record an address names (``None`` when there is none)."""
    from mlrecipe.runner.state import find_records

    addr = parse_address(release, namespace, backend)
    records = find_records(addr.release, addr.namespace, addr.backend)
    if len(records) > 1:
        where = ", ".join(f"{r.backend}://{r.namespace}/{r.release}" for r in records)
        raise UserError(f"release '{addr.release}' exists more than once ({where}): give the full address")
    return records[0] if records else None


def check_step(record: ReleaseRecord, step: str | None) -> None:
    """Raise :class:`UserError` (exit 2, naming the release's steps) when an address names a step the release does
    not have."""
    if step is not None and step not in record.order:
        raise UserError(f"release '{record.release}' has no step '{step}' (steps: {', '.join(record.order)})")


def resume(release: str, namespace: str | None, backend: str | None, out: str, opts: list[str],
           max_parallel: int = 4, keep_going: bool = False) -> ExitCode:
    """Continue a release after its last successful step."""
    lifecycle.skip_pydantic_plugins()
    from mlrecipe.backends.base import AdoptsSubmitted, StepState
    from mlrecipe.runner.lock import driving
    from mlrecipe.runner.progress import make_display
    from mlrecipe.runner.recorded_inputs import recorded_backend_opts, restore, with_backend_opts
    from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
    from mlrecipe.runner.state import STATE_FILE, read_record

    try:
        found = one_record(release, namespace, backend)
        if found is None:
            from mlrecipe.config import mlrecipe_home

            return fail(f"release '{release}' not found in {mlrecipe_home()} (see 'mlrecipe list'). Started from "
                        "another machine or MLRECIPE_HOME? Run its pipeline again (mlrecipe run FILE, the same "
                        "--set and -B): its SageMaker jobs are found by their tags and adopted, never started twice")
        with driving(found.directory, found.address):
            record = read_record(found.directory / STATE_FILE)  # as it is now that no other driver runs
            if record.state is StepState.SUCCEEDED:
                print(f"release {record.address} already succeeded; nothing to do")
                return ExitCode.OK
            inputs = with_backend_opts(restore(record.inputs, dict(os.environ)), opts)
            impl, others = _backends(record.backend, None, recorded_backend_opts(inputs))
            spec = spec_from_inputs(inputs)
            runner = ReleaseRunner(spec, impl, inputs, make_display(out), max_parallel=max_parallel,
                                   keep_going=keep_going, backend_options=others)
            for step in record.steps.values():
                if step.state is StepState.RUNNING and step.handle:
                    step_impl = runner.backends.named(record.backend_of(step))
                    if not isinstance(step_impl, AdoptsSubmitted):  # else its submit adopts the step's job
                        step_impl.cancel_handle(step_impl.load_handle(step.handle))
                    step.state = StepState.INTERRUPTED
            lifecycle.started()
            code = runner.run()
    except MlrecipeError as exc:
        return print_error(exc)
    if out != "json":
        from mlrecipe.cli.sweep_table import print_sweeps

        return print_sweeps(runner, code)
    return code


def _stop_driver(record: ReleaseRecord) -> None:
    if record.driver_alive() and record.driver_pid is not None and record.driver_pid != os.getpid():
        os.kill(record.driver_pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while record.driver_alive() and time.monotonic() < deadline:
            time.sleep(0.1)


def _uninstall_by_tags(release: str, namespace: str | None, backend: str | None, opts: list[str]) -> ExitCode:
    """No state of the release here: a backend the address names that finds resources by their release tags
    (:class:`RemovesByRelease`) removes them; otherwise there is nothing to do."""
    from mlrecipe.backends.base import RemovesByRelease
    from mlrecipe.backends.registry import backend_class

    addr = parse_address(release, namespace, backend)
    if addr.backend is None or not issubclass(backend_class(addr.backend), RemovesByRelease):
        print(f"release '{release}' not found; nothing to do")
        return ExitCode.OK
    try:
        impl, _ = _backends(addr.backend, None, opts)
        assert isinstance(impl, RemovesByRelease)
        done = impl.remove_release(addr.release, addr.namespace)
    except (BackendError, UserError) as exc:
        return fail(f"release '{release}' has no state here and its {addr.backend} resources could not be looked up "
                    f"by their tags: {exc}", ExitCode.FAILED)
    for line in done:
        print(f"{addr.backend}: {line}")
    if not done:
        print(f"release '{release}' not found (no state here, nothing on {addr.backend} tagged with it); nothing to do")
    else:
        print(f"release {addr.backend}://{addr.namespace or '*'}/{addr.release} uninstalled (found by its tags)")
    return ExitCode.OK


def uninstall(release: str, namespace: str | None, backend: str | None, opts: list[str]) -> ExitCode:
    """Stop what the release runs and remove its state; a missing release is not an error. Without state here, a
    backend that finds the release's resources by their tags removes them (``sagemaker://<namespace>/<release>``)."""
    from mlrecipe.backends.base import RemovesByRelease
    from mlrecipe.runner.state import check_no_links
    from mlrecipe.states import StepState

    try:
        record = one_record(release, namespace, backend)
        if record is None:
            return _uninstall_by_tags(release, namespace, backend, opts)
        check_step(record, parse_address(release, namespace, backend).step)  # a typo must not remove everything
        check_no_links(record.directory)  # the directory the record was read from, nothing it names
        _stop_driver(record)
        backends = record_backends(record, opts)
    except UserError as exc:
        return print_error(exc)
    failures = []
    swept: dict[str, dict[str, Any] | None] = {}  # backends that find resources by tags: a handle of each
    for step in record.steps.values():
        if not step.handle:  # a submission that failed part way may have made resources: found by their tags
            with contextlib.suppress(BackendError, UserError):
                impl = backends.named(record.backend_of(step))
                if isinstance(impl, RemovesByRelease) and step.state is not StepState.PENDING:
                    swept.setdefault(impl.name, None)
            continue
        try:
            impl = backends.named(record.backend_of(step))
            impl.cancel_handle(impl.load_handle(step.handle))
            if isinstance(impl, RemovesByRelease) and swept.get(impl.name) is None:
                swept[impl.name] = step.handle
        except (BackendError, UserError) as exc:
            failures.append(f"step {step.name}: {exc}")
    for name, handle in swept.items():  # what another MLRECIPE_HOME (a KFP task's pod) made in this release
        try:
            impl = backends.named(name)
            assert isinstance(impl, RemovesByRelease)
            for line in impl.remove_release(record.release, record.namespace, handle):
                print(f"{name}: {line}")
        except (BackendError, UserError) as exc:
            if handle is None:  # no step of it ever got a handle: a lookup that cannot be made keeps nothing back
                print(f"warning: {name} resources tagged with release {record.release} could not be looked up: {exc}",
                      file=sys.stderr)
            else:
                failures.append(f"{name} resources tagged with release {record.release}: {exc}")
    if failures:
        for line in failures:
            fail(line)
        return fail(f"release {record.release} was not uninstalled; its state is kept in {record.directory} "
                    "(run uninstall again once the backend answers)", ExitCode.FAILED)
    try:
        shutil.rmtree(record.directory)
    except OSError as exc:
        return fail(f"release {record.address} was stopped but its state could not be removed: {exc}",
                    ExitCode.FAILED)
    print(f"release {record.address} uninstalled")
    return ExitCode.OK
