"""Commands that run things: install, run, template, resume, uninstall."""

from __future__ import annotations

import os
import shutil
import signal
import time
from typing import Any

from mlrecipe.cli.address import parse_address
from mlrecipe.cli.output import emit_json, fail, print_spec_error
from mlrecipe.spec.errors import SpecError


def _backend(name: str | None, spec_backend: str | None):
    from mlrecipe.backends.registry import DEFAULT_BACKEND, get_backend

    return get_backend(name or spec_backend or DEFAULT_BACKEND)


def _summary(record: Any) -> dict[str, Any]:
    return {
        "address": f"{record.backend}://{record.namespace}/{record.release}",
        "state": record.effective_state(),
        "steps": [
            {"name": s.name, "chart": s.chart, "state": s.state, "exit_code": s.exit_code, "message": s.message,
             "url": s.url}
            for s in (record.steps[n] for n in record.order if n in record.steps)
        ],
    }


def run_inputs(inputs: dict[str, Any], backend: str | None, dry_run: bool, force: bool, out: str) -> int:
    """Validate, then print the plan (dry run) or run the release; return the exit code."""
    from mlrecipe.backends.registry import UnknownBackendError
    from mlrecipe.runner.progress import make_display
    from mlrecipe.runner.release import ReleaseBusyError, ReleaseRunner, spec_from_inputs
    from mlrecipe.runner.state import load_record

    try:
        spec = spec_from_inputs(inputs)
        if inputs["kind"] == "install" and inputs.get("namespace"):
            spec = type(spec)(spec.release, inputs["namespace"], spec.steps, spec.backend, spec.source)
        impl = _backend(backend, spec.backend)
    except SpecError as exc:
        print_spec_error(exc)
        return 2
    except UnknownBackendError as exc:
        return fail(str(exc))
    runner = ReleaseRunner(spec, impl, inputs, make_display("json" if dry_run else out), force=force)
    problems = runner.problems()
    if problems:
        for p in problems:
            fail(p)
        return fail("nothing was started")
    if dry_run:
        try:
            print(runner.materialize(), end="")
        except SpecError as exc:
            print_spec_error(exc)
            return 2
        return 0
    try:
        code = runner.run()
    except ReleaseBusyError as exc:
        return fail(str(exc), 1)
    if out == "json":
        record = load_record(impl.name, spec.namespace, spec.release)
        if record is not None:
            emit_json(_summary(record))
    return code


def _one_record(release: str, namespace: str | None, backend: str | None):
    from mlrecipe.runner.state import find_records

    addr = parse_address(release, namespace, backend)
    records = find_records(addr.release, addr.namespace, addr.backend)
    if len(records) > 1:
        where = ", ".join(f"{r.backend}://{r.namespace}/{r.release}" for r in records)
        raise LookupError(f"release '{addr.release}' exists more than once ({where}): give the full address")
    return records[0] if records else None


def resume(release: str, namespace: str | None, backend: str | None, out: str) -> int:
    """Continue a release after its last successful step."""
    from mlrecipe.runner.progress import make_display
    from mlrecipe.runner.release import ReleaseBusyError, ReleaseRunner, spec_from_inputs

    try:
        record = _one_record(release, namespace, backend)
    except (LookupError, ValueError) as exc:
        return fail(str(exc))
    if record is None:
        return fail(f"release '{release}' not found (see 'mlrecipe list')")
    if record.driver_alive():
        return fail(f"release {record.release} is still being run by process {record.driver_pid}", 1)
    if record.state == "succeeded":
        print(f"release {record.backend}://{record.namespace}/{record.release} already succeeded; nothing to do")
        return 0
    impl = _backend(record.backend, None)
    for step in record.steps.values():
        if step.state == "running" and step.handle:
            impl.cancel_handle(step.handle)
            step.state = "interrupted"
    try:
        spec = spec_from_inputs(record.inputs)
    except SpecError as exc:
        print_spec_error(exc)
        return 2
    runner = ReleaseRunner(spec, impl, record.inputs, make_display(out))
    try:
        return runner.run()
    except ReleaseBusyError as exc:
        return fail(str(exc), 1)


def uninstall(release: str, namespace: str | None, backend: str | None) -> int:
    """Stop what the release runs and remove its state; a missing release is not an error."""
    try:
        record = _one_record(release, namespace, backend)
    except (LookupError, ValueError) as exc:
        return fail(str(exc))
    if record is None:
        print(f"release '{release}' not found; nothing to do")
        return 0
    if record.driver_alive() and record.driver_pid is not None and record.driver_pid != os.getpid():
        os.kill(record.driver_pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while record.driver_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    impl = _backend(record.backend, None)
    for step in record.steps.values():
        if step.handle:
            impl.cancel_handle(step.handle)
    shutil.rmtree(record.directory, ignore_errors=True)
    print(f"release {record.backend}://{record.namespace}/{record.release} uninstalled")
    return 0
