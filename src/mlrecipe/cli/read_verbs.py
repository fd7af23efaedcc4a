"""The verbs people run in loops (``status``, ``list``, ``logs``) and ``validate``, as plain functions that return
their exit code: the Typer commands of :mod:`mlrecipe.cli.app` call them, and so does the console entry
(:mod:`mlrecipe.cli.entry`) for the command lines it reads without Typer (:mod:`mlrecipe.cli.plain_lines`).

Each takes its Typer command's parameters, by the same names and with the same defaults
(``tests/unit/test_cli_plain_lines.py`` checks both), so that both ways run the same code.
"""

from __future__ import annotations

from pathlib import Path

from mlrecipe.errors import ExitCode


def backend_opts(opts: list[str] | None, kubeconfig: str | None, kube_context: str | None) -> list[str]:
    """The ``--backend-opt`` expressions, with the Kubernetes shortcuts added."""
    out = list(opts or [])
    out += [f"kubeconfig={kubeconfig}"] if kubeconfig else []
    out += [f"context={kube_context}"] if kube_context else []
    return out


def status(release: str | None = None, namespace: str | None = None, backend: str | None = None, out: str = "text",
           backend_opt: list[str] | None = None, kubeconfig: str | None = None,
           kube_context: str | None = None) -> ExitCode:
    """``mlrecipe status [RELEASE]``."""
    from mlrecipe.cli import inspect_cmd

    return inspect_cmd.status(release, namespace, backend, out, backend_opts(backend_opt, kubeconfig, kube_context))


def list_(out: str = "text") -> ExitCode:
    """``mlrecipe list``."""
    from mlrecipe.cli import inspect_cmd

    return inspect_cmd.status(None, None, None, out, [])


def logs(release: str, step: str | None = None, follow: bool = False, rank: int = 0, namespace: str | None = None,
         backend: str | None = None, backend_opt: list[str] | None = None, kubeconfig: str | None = None,
         kube_context: str | None = None) -> ExitCode:
    """``mlrecipe logs RELEASE [STEP]``."""
    from mlrecipe.cli import inspect_cmd

    opts = backend_opts(backend_opt, kubeconfig, kube_context)
    return inspect_cmd.logs(release, step, follow, rank, namespace, backend, opts)


def validate(file: str | Path, chart: str | None = None, out: str = "text", backend: str | None = None,
             backend_opt: list[str] | None = None, kubeconfig: str | None = None,
             kube_context: str | None = None) -> ExitCode:
    """``mlrecipe validate FILE``."""
    from mlrecipe.cli import inspect_cmd

    opts = backend_opts(backend_opt, kubeconfig, kube_context)
    return inspect_cmd.validate(Path(file), chart, out, backend, opts)
