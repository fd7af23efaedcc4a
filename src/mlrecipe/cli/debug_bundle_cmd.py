"""``mlrecipe debug-bundle``: one ``.tar.gz`` with what it takes to reconstruct a release's failure
(:mod:`mlrecipe.runner.bundle`)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from mlrecipe.errors import ExitCode


def bundle_path(release: str, given: Path | None) -> Path:
    """Where the bundle goes: ``given``, else ``<release>-debug-<UTC timestamp>.tar.gz`` in the current directory."""
    if given is not None:
        return given
    return Path.cwd() / f"{release}-debug-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.tar.gz"


def make_bundle(release: str, step: str | None, output: Path | None, namespace: str | None, backend: str | None,
                opts: list[str]) -> ExitCode:
    """Collect and write the bundle; an unknown release or step, or an output path that cannot be written, is one
    ``error:`` line and exit 2 with nothing written."""
    from mlrecipe.cli.address import parse_address
    from mlrecipe.cli.execute import one_record, record_backends
    from mlrecipe.cli.output import fail, print_error
    from mlrecipe.errors import MlrecipeError
    from mlrecipe.runner.bundle import collect

    try:
        record = one_record(release, namespace, backend)
        if record is None:
            return fail(f"release '{release}' not found (see 'mlrecipe list')")
        step = step or parse_address(release, namespace, backend).step
        if step is not None and step not in record.order:
            return fail(f"release '{release}' has no step '{step}' (steps: {', '.join(record.order)})")
        path = bundle_path(record.release, output)
        if path.is_dir():
            return fail(f"-o {path} is a directory: name the bundle's file (e.g. {path / 'bundle.tar.gz'})")
        if not path.parent.is_dir():
            return fail(f"-o {path}: the directory {path.parent} does not exist")
        backends = record_backends(record, opts)
    except MlrecipeError as exc:
        return print_error(exc)

    def say(text: str) -> None:
        print(f"debug-bundle: {text}", file=sys.stderr, flush=True)

    try:
        bundle = collect(record, backends, step, path, say, dict(os.environ))
    except OSError as exc:
        return fail(f"cannot write {path}: {exc.strerror or exc}", ExitCode.FAILED)
    told = (f"; {len(bundle.missing)} thing(s) could not be collected (MANIFEST.txt says why)" if bundle.missing
            else "")
    say(f"wrote {path} ({len(bundle.files) + 1} files, {path.stat().st_size} bytes){told}")
    print(path)
    return ExitCode.OK


def debug_bundle(
    release: Annotated[str, typer.Argument(help="Release or backend://namespace/release[/step]")],
    step: Annotated[str | None, typer.Argument(help="Only this step's logs and backend records (default: every "
                                               "step)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="The bundle's file (default: "
                                                "<release>-debug-<UTC timestamp>.tar.gz here)")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace (Kubernetes) or session "
                                                  "name")] = None,
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="The release's backend")] = None,
    backend_opt: Annotated[list[str] | None, typer.Option("--backend-opt", "-B", help="Backend option key=value "
                                                          "(BACKEND.key=value for a step's own backend)")] = None,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="kubernetes: kubeconfig file")] = None,
    kube_context: Annotated[str | None, typer.Option("--kube-context", help="kubernetes: kubeconfig "
                                                     "context")] = None,
) -> None:
    """Write one .tar.gz with what it takes to reconstruct a failure: every step's plan (as 'template' prints
    it), the state record, every node's and rank's log and the files beside them (watchdog stacks, fabric check
    figures), what the backend still holds (Kubernetes pod logs and events, Slurm scontrol/sacct, SageMaker
    DescribeTrainingJob and log streams), versions, and each step's env; credentials masked in every file.

    MANIFEST.txt in the bundle lists its files and what could not be collected, with why. Progress goes to
    stderr, the bundle's path to stdout.
    """
    opts = list(backend_opt or [])
    opts += [f"kubeconfig={kubeconfig}"] if kubeconfig else []
    opts += [f"context={kube_context}"] if kube_context else []
    raise typer.Exit(make_bundle(release, step, output, namespace, backend, opts))


def register(app: typer.Typer) -> None:
    """Add the ``debug-bundle`` command to the ``mlrecipe`` app."""
    app.command("debug-bundle")(debug_bundle)
