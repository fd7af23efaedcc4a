"""The commands people run in loops (``watch mlrecipe status``) load only what they use: checked by the modules a
real CLI process has imported when it exits, not by a clock (``benchmarks/bench_read_commands.py`` has the times).

Read-only commands on an ended release (``list``, ``status``, ``logs``) and ``--help`` of every verb import no recipe
model, no backend contract (pydantic), no cloud or cluster client, no torch and no Helm library; ``validate`` loads
the recipe models but no cloud or cluster client, no torch, and Helm's library only for expressions beyond plain
fields (the quickstart's are plain). The
plain command lines of ``list``, ``status``, ``logs`` and ``validate`` do not import Typer
(:mod:`mlrecipe.cli.plain_lines`), nor does a verb's ``--help`` (:mod:`mlrecipe.cli.help_texts`), but for the verbs
of command modules and the listing of every verb.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer.main

from mlrecipe.cli.app import COMMAND_MODULES, app
from tests.repo import BIN, EXAMPLES, cli_env

pytestmark = pytest.mark.integration

CLOUD_AND_HEAVY = ("boto3", "botocore", "kubernetes", "torch", "transformers", "ray", "vllm")
MODELS_AND_HELM = ("pydantic", "mlrecipe.spec.recipe", "mlrecipe.spec.load", "mlrecipe.spec.pipeline",
                   "mlrecipe.backends.base", "helm_python", "yaml", "psutil")
#: Modules the read-only commands once loaded for nothing (the step runtime: for a fabric check's figures, which a
#: release without the check has not; ``mlrecipe.metrics``: for a running step's progress figures).
READ_ONLY_NEEDS_NOT = ("mlrecipe.runtime.step_runtime", "mlrecipe.metrics")
#: Modules ``validate`` of the quickstart (no watchdog, no cluster) once loaded for nothing (``importlib.metadata``:
#: for pydantic's plugin scan, which the CLI skips; the Helm engine, subprocess, tarfile: for expressions beyond
#: plain fields, which the quickstart has not).
VALIDATE_NEEDS_NOT = ("mlrecipe.runtime.step_runtime", "mlrecipe.runner", "mlrecipe.backends.registry",
                      "importlib.metadata", "helm_python", "mlrecipe.helm.render", "tarfile", "subprocess")
PROBE = textwrap.dedent("""\
    import atexit, json, sys
    out, args = sys.argv[1], sys.argv[2:]
    atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
    sys.argv = ["mlrecipe", *args]
    from mlrecipe.cli.entry import main  # what the console script runs
    main()
    """)
BROKEN_MODULE = textwrap.dedent("""\
    import sys
    module, args = sys.argv[1], sys.argv[2:]
    sys.modules[module] = None  # importing it raises ImportError, as a module with a missing dependency would
    sys.argv = ["mlrecipe", *args]
    from mlrecipe.cli.entry import main
    main()
    """)
VERBS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _imported(tmp_path: Path, env: dict[str, str], *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(out.read_text()))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


@pytest.fixture(scope="module")
def ended_release(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A release whose one step ran and ended, in an MLRECIPE_HOME of its own."""
    root = tmp_path_factory.mktemp("cli-imports")
    env = cli_env(root / "mlhome")
    recipe = root / "echo.yaml"
    recipe.write_text("image: python:3.11\nprocess:\n  command: [echo]\n  args: [hello]\n")
    subprocess.run([str(BIN / "mlrecipe"), "install", "ended", "data-prep/data-process", "-f", str(recipe)],
                   env=env, check=True, capture_output=True, timeout=120)
    return env


@pytest.mark.parametrize("args", [("list",), ("status",), ("status", "ended"), ("status", "-o", "json", "ended"),
                                  ("logs", "ended", "data-process")], ids=" ".join)
def test_read_only_commands_load_no_models_clients_or_helm(args: tuple[str, ...], ended_release: dict[str, str],
                                                            tmp_path: Path) -> None:
    modules = _imported(tmp_path, ended_release, *args)
    assert _loaded(modules, CLOUD_AND_HEAVY + MODELS_AND_HELM + READ_ONLY_NEEDS_NOT + ("typer",)) == []
    assert "mlrecipe.runner.state" in modules  # it did read the records


@pytest.mark.parametrize("verb", ["", *VERBS])
def test_help_of_every_verb_loads_no_models_clients_or_helm(verb: str, tmp_path: Path) -> None:
    env = {**cli_env(tmp_path / "mlhome"), "COLUMNS": "80"}  # the kept help's width (mlrecipe.cli.help_texts)
    modules = _imported(tmp_path, env, *([verb] if verb else []), "--help")
    assert _loaded(modules, CLOUD_AND_HEAVY + MODELS_AND_HELM) == []
    kept = verb and verb not in COMMAND_MODULES  # printed from mlrecipe.cli.help_texts
    assert ("typer" in modules) != kept, "a verb of the app prints its kept help; the listing and modules are Typer's"


def test_validate_loads_the_models_but_no_cluster_or_cloud_client(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "mlhome")
    modules = _imported(tmp_path, env, "validate", str(EXAMPLES / "quickstart" / "pipeline.yaml"))
    assert "mlrecipe.spec.recipe" in modules
    assert _loaded(modules, CLOUD_AND_HEAVY + VALIDATE_NEEDS_NOT + ("typer",)) == []


@pytest.mark.parametrize(("verb", "module"), [("doctor", "mlrecipe.cli.doctor_cmd"),
                                              ("compile", "mlrecipe.cli.compile_cmd")])
def test_a_command_whose_module_cannot_be_imported_is_listed_and_says_why(verb: str, module: str,
                                                                          tmp_path: Path) -> None:
    env = cli_env(tmp_path / "mlhome")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", BROKEN_MODULE, module, *args], env=env, capture_output=True,
                              text=True, timeout=60)

    listing = cli("--help")
    assert listing.returncode == 0, listing.stderr
    assert f"{verb} " in listing.stdout and "Not available here" in listing.stdout
    used = cli(verb, "kfp", "pipeline.yaml", "--output", "x.json")
    assert used.returncode == 1
    assert used.stderr.splitlines() == [
        f"error: 'mlrecipe {verb}' is not available: importing {module} failed: import of {module} halted; "
        f"None in sys.modules"]
    assert cli("list").returncode == 0  # the other commands work
