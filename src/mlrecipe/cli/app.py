"""The ``mlrecipe`` command line, shaped like Helm: install, run, template, status, logs, ...

Heavy modules (backends, Helm, torch) are imported inside the commands that need them, so
``mlrecipe --help`` and ``mlrecipe validate`` stay fast.
"""

from __future__ import annotations

import sys

from mlrecipe.cli import lifecycle

lifecycle.begin_if_program(sys.argv[0])  # before Typer's imports, when this is the mlrecipe program

from pathlib import Path  # noqa: E402
from typing import Annotated, Any  # noqa: E402

import typer  # noqa: E402

from mlrecipe.cli import address, output, read_verbs  # noqa: E402
from mlrecipe.cli.read_verbs import backend_opts  # noqa: E402
from mlrecipe.errors import ExitCode  # noqa: E402

APP_SETTINGS: dict[str, Any] = {
    "name": "mlrecipe",
    "help": (
        "Run ML pipelines (data prep, distributed training, evaluation, serving) from YAML recipes, "
        "on this machine (default), on Slurm, or on Kubernetes / EKS through Helm charts.\n\n"
        "Examples:\n\n"
        "  mlrecipe run examples/quickstart/pipeline.yaml\n\n"
        "  mlrecipe install my-run training/pytorchjob-distributed -f recipe.yaml --set resources.nnodes=2\n\n"
        "  mlrecipe template my-run training/pytorchjob-elastic -f recipe.yaml --backend kubernetes"
    ),
    "no_args_is_help": True,
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "rich_markup_mode": None,
}
app = typer.Typer(**APP_SETTINGS)

BackendOpt = Annotated[
    str | None, typer.Option("--backend", "-b", help="local (default), slurm, kubernetes or sagemaker")
]
NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (Kubernetes) or session name (default: default)")
]
OutputOpt = Annotated[str, typer.Option("--output", "-o", help="text or json")]
FilesOpt = Annotated[
    list[Path], typer.Option("--values", "-f", help="Recipe (values) file; repeat to overlay, last wins")
]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="Override a value, Helm syntax: key.sub=value[,key2=value2]")
]
BackendOptsOpt = Annotated[
    list[str] | None,
    typer.Option("--backend-opt", "-B", help="Backend option key=value (repeatable; wins over the config file); "
                 "BACKEND.key=value for a step's own backend (-B sagemaker.mode=local); "
                 "see 'mlrecipe options BACKEND'"),
]
KubeconfigOpt = Annotated[
    str | None, typer.Option("--kubeconfig", help="kubernetes: kubeconfig file (= --backend-opt kubeconfig=...)")
]
KubeContextOpt = Annotated[
    str | None, typer.Option("--kube-context", help="kubernetes: kubeconfig context (= --backend-opt context=...)")
]


DEFAULT_MAX_PARALLEL = 4
MaxParallelOpt = Annotated[
    int, typer.Option("--max-parallel", min=1, help="Most steps running at the same time (independent branches)")
]
KeepGoingOpt = Annotated[
    bool, typer.Option("--keep-going", help="When a step fails, let the independent branches finish (default: "
                       "cancel the running steps)")
]
KeepOnFailureOpt = Annotated[
    bool, typer.Option("--keep-on-failure", help="Leave a failed step's cluster objects (pods, a Slurm job, ...) for "
                       "inspection instead of removing them; 'mlrecipe uninstall RELEASE' removes them later")
]


def _install_inputs(
    release: str, chart: str, values: list[Path], sets: list[str] | None, namespace: str | None
) -> dict[str, object]:
    """The recorded inputs of a one-step release (what ``resume`` reloads)."""
    from mlrecipe.runner.release_inputs import InstallInputs

    return InstallInputs(release, chart, tuple(str(p.resolve()) for p in values), tuple(str(p) for p in values),
                         tuple(sets or ()), "default" if namespace is None else namespace).record()


@app.command()
def install(
    release: Annotated[str, typer.Argument(help="Release name")],
    chart: Annotated[str, typer.Argument(help="Catalog chart, e.g. training/pytorchjob-distributed")],
    values: FilesOpt,
    set_: SetOpt = None,
    backend: BackendOpt = None,
    namespace: NamespaceOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; run nothing")] = False,
    force: Annotated[bool, typer.Option("--force", help="Re-run even if unchanged since its last success")] = False,
    out: OutputOpt = "text",
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
    keep_on_failure: KeepOnFailureOpt = False,
) -> None:
    """Run one step: CHART with the recipe(s) given by -f, as release RELEASE."""
    from mlrecipe.cli import execute

    inputs = _install_inputs(release, chart, values, set_, namespace)
    opts = backend_opts(backend_opt, kubeconfig, kube_context)
    raise typer.Exit(execute.run_inputs(inputs, backend, opts, dry_run, force, out, keep_on_failure=keep_on_failure))


@app.command()
def run(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline file (release, namespace, steps)")],
    set_: SetOpt = None,
    backend: BackendOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print every step's plan; run nothing")] = False,
    force: Annotated[bool, typer.Option("--force", help="Re-run steps that are unchanged since their success")] = False,
    out: OutputOpt = "text",
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
    max_parallel: MaxParallelOpt = DEFAULT_MAX_PARALLEL,
    keep_going: KeepGoingOpt = False,
    keep_on_failure: KeepOnFailureOpt = False,
) -> None:
    """Run a pipeline as one release: each step once the steps it depends on are done (depends_on; without
    it, in file order), independent ones at the same time.

    --set STEP.key=value overrides a value of one step.
    """
    from mlrecipe.cli import execute
    from mlrecipe.runner.release_inputs import PipelineInputs

    inputs = PipelineInputs(str(pipeline.resolve()), tuple(set_ or ())).record()
    opts = backend_opts(backend_opt, kubeconfig, kube_context)
    raise typer.Exit(execute.run_inputs(inputs, backend, opts, dry_run, force, out, max_parallel, keep_going,
                                        keep_on_failure))


@app.command()
def template(
    release: Annotated[str, typer.Argument(help="Release name")],
    chart: Annotated[str, typer.Argument(help="Catalog chart")],
    values: FilesOpt,
    set_: SetOpt = None,
    backend: BackendOpt = None,
    namespace: NamespaceOpt = None,
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
) -> None:
    """Print exactly what would run: per node argv/env/script, manifests, or a batch script."""
    from mlrecipe.cli import execute

    inputs = _install_inputs(release, chart, values, set_, namespace)
    opts = backend_opts(backend_opt, kubeconfig, kube_context)
    raise typer.Exit(execute.run_inputs(inputs, backend, opts, True, False, "text"))


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="A pipeline file or a recipe file")],
    chart: Annotated[str | None, typer.Option("--chart", "-c", help="Chart of a recipe file")] = None,
    out: OutputOpt = "text",
    backend: Annotated[
        str | None, typer.Option("--backend", "-b", help="Also plan every step for this backend (kubernetes: "
                                 "render the charts, with every check their templates apply)")
    ] = None,
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
) -> None:
    """Check a pipeline or recipe; print every problem with file, line and field; exit 2 if any.

    With --backend (or a pipeline's backend:), each step is also planned for that backend, exactly as
    'run --dry-run' would, so that "valid" means "renders": e.g. a Kubernetes chart's 'image is required'.
    """
    raise typer.Exit(read_verbs.validate(file, chart, out, backend, backend_opt, kubeconfig, kube_context))


@app.command()
def schema(
    kind: Annotated[str, typer.Argument(help="recipe, pipeline or config")] = "recipe",
) -> None:
    """Print the JSON Schema of recipes, pipelines or the config file (for editors' hover help)."""
    from mlrecipe.cli import inspect_cmd

    raise typer.Exit(inspect_cmd.schema(kind))


@app.command()
def status(
    release: Annotated[str | None, typer.Argument(help="Release or backend://namespace/release")] = None,
    namespace: NamespaceOpt = None,
    backend: BackendOpt = None,
    out: OutputOpt = "text",
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
) -> None:
    """Show the state of one release (or of all); a serving step whose server is gone shows as such."""
    raise typer.Exit(read_verbs.status(release, namespace, backend, out, backend_opt, kubeconfig, kube_context))


@app.command("list")
def list_(out: OutputOpt = "text") -> None:
    """List releases with their backend, namespace and state."""
    raise typer.Exit(read_verbs.list_(out))


@app.command()
def logs(
    release: Annotated[str, typer.Argument(help="Release or backend://namespace/release[/step]")],
    step: Annotated[str | None, typer.Argument(help="Step (default: the last one that ran)")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines")] = False,
    rank: Annotated[int, typer.Option("--rank", help="Node rank")] = 0,
    namespace: NamespaceOpt = None,
    backend: BackendOpt = None,
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
) -> None:
    """Print the log of one node of a step."""
    raise typer.Exit(read_verbs.logs(release, step, follow, rank, namespace, backend, backend_opt, kubeconfig,
                                     kube_context))


@app.command()
def resume(
    release: Annotated[str, typer.Argument(help="Release or backend://namespace/release")],
    namespace: NamespaceOpt = None,
    backend: BackendOpt = None,
    out: OutputOpt = "text",
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
    max_parallel: MaxParallelOpt = DEFAULT_MAX_PARALLEL,
    keep_going: KeepGoingOpt = False,
) -> None:
    """Continue a failed or interrupted release: steps that succeeded unchanged are not run again."""
    from mlrecipe.cli import execute

    opts = backend_opts(backend_opt, kubeconfig, kube_context)
    raise typer.Exit(execute.resume(release, namespace, backend, out, opts, max_parallel, keep_going))


@app.command()
def uninstall(
    release: Annotated[str, typer.Argument(help="Release or backend://namespace/release")],
    namespace: NamespaceOpt = None,
    backend: BackendOpt = None,
    backend_opt: BackendOptsOpt = None,
    kubeconfig: KubeconfigOpt = None,
    kube_context: KubeContextOpt = None,
) -> None:
    """Stop everything the release runs and remove its state (idempotent).

    Each step is stopped on the cluster its handle recorded; the state is kept when a step cannot be
    stopped (exit 1), so that uninstall can be run again.
    """
    from mlrecipe.cli import execute

    opts = backend_opts(backend_opt, kubeconfig, kube_context)
    raise typer.Exit(execute.uninstall(release, namespace, backend, opts))


@app.command()
def paths() -> None:
    """Print where the chart library and the examples are (in the installed package, or the checkout)."""
    from mlrecipe.config import mlrecipe_home
    from mlrecipe.data import data_dir

    print(f"charts    {data_dir('charts') / 'machine-learning'}")
    print(f"examples  {data_dir('examples')}")
    print(f"home      {mlrecipe_home()}")


@app.command()
def options(
    backend: Annotated[str | None, typer.Argument(help="local, slurm, kubernetes or sagemaker (default: all)")] = None,
) -> None:
    """List a backend's options: name, type, default and meaning.

    Set them in $MLRECIPE_HOME/config.yaml under the backend's name, or per command with
    --backend-opt key=value (e.g. -B stuck_timeout=900, -B images.my/image=/opt/venv); a step's own backend
    in a hybrid pipeline takes them with its name first (-B sagemaker.mode=local).
    """
    from mlrecipe.cli import inspect_cmd

    raise typer.Exit(inspect_cmd.options(backend))


#: The commands that live in modules of their own, by name: each module's ``register`` adds its command.
COMMAND_MODULES = {
    "debug-bundle": "mlrecipe.cli.debug_bundle_cmd",
    "doctor": "mlrecipe.cli.doctor_cmd",
    "cluster": "mlrecipe.cli.cluster_cmd",
    "compile": "mlrecipe.cli.compile_cmd",
}


def register_command_modules(target: typer.Typer, modules: dict[str, str]) -> None:
    """Add each module's command to ``target``; a module that cannot be imported still gets its command, one that
    says why it cannot run (exit 1) instead of the command vanishing from ``--help`` and every other command failing.
    """
    import importlib

    for name, module in modules.items():
        try:
            importlib.import_module(module).register(target)
        except ImportError as exc:
            _register_unavailable(target, name, module, exc)


def _register_unavailable(target: typer.Typer, name: str, module: str, exc: ImportError) -> None:
    reason = f"importing {module} failed: {exc}"
    if exc.name and exc.name != module:
        reason += f" (install the package that provides {exc.name!r}, or reinstall mlrecipe)"

    def unavailable(ctx: typer.Context) -> None:
        raise typer.Exit(output.fail(f"'mlrecipe {name}' is not available: {reason}", ExitCode.FAILED))

    target.command(name, help=f"Not available here: {reason}",
                   context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(unavailable)


register_command_modules(app, COMMAND_MODULES)


def _group_of_one() -> None:
    """The group's own callback: nothing to do (it keeps the one command a subcommand, ``mlrecipe VERB``)."""


def _verb(info: typer.models.CommandInfo) -> str:
    """The name of a registered command, as Typer names it."""
    return info.name or getattr(info.callback, "__name__", "").lower().replace("_", "-")


def _listing() -> typer.Typer:
    """``app`` for its own help: each verb's name and help, without the options only the verb's own help shows."""
    import copy
    import inspect

    listing = typer.Typer(**APP_SETTINGS)
    for info in app.registered_commands:
        shown = copy.copy(info)
        shown.name = _verb(info)
        shown.help = info.help if info.help is not None else inspect.getdoc(info.callback)
        shown.callback = _group_of_one  # never called: the help is printed instead
        listing.registered_commands.append(shown)
    listing.registered_groups = app.registered_groups
    return listing


def app_for(args: list[str]) -> typer.Typer:
    """The app that runs the command line ``args``: ``app`` with only the command they name, when they name one of
    the commands defined here (Typer builds the command line of every verb, all their options, before it runs one:
    about 15 ms of a command's 0.1 s); for ``mlrecipe`` and ``mlrecipe --help``, the verbs without their options;
    else ``app`` itself (a group such as ``cluster``, a typo)."""
    if args in ([], ["--help"]):
        return _listing()
    named = [info for info in app.registered_commands if args and _verb(info) == args[0]]
    if len(named) != 1:
        return app
    alone = typer.Typer(**APP_SETTINGS, callback=_group_of_one)
    alone.registered_commands = named
    return alone


def main() -> None:
    """Console entry point: clean messages and named exit codes, no tracebacks for mlrecipe's own errors."""
    lifecycle.begin()
    sys.exit(output.guarded(app_for(sys.argv[1:])))


__all__ = ["address", "app", "main"]
