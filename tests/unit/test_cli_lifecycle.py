"""The CLI's cheap start and exit (:mod:`mlrecipe.cli.lifecycle`): rare collections while it starts (from the import
of the CLI on, in the ``mlrecipe`` program), the usual pace once it waits, pydantic's plugin scan (and, before pydantic
loaded its plugin loader, ``importlib.metadata``) skipped in the CLI only. Each case runs in a fresh interpreter (the
collector and pydantic's plugin cache are process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration  # starts real processes

CHECK = textwrap.dedent("""
    import gc, sys
    from pydantic.plugin import _loader
    from mlrecipe.cli import lifecycle

    usual = gc.get_threshold()
    if sys.argv[1] == "cli":
        lifecycle.begin()
        assert gc.get_threshold()[0] == lifecycle.START_GC_THRESHOLD, gc.get_threshold()
        lifecycle.skip_pydantic_plugins()
        print("plugins", "skipped" if _loader._plugins == {} else "looked for at first use")
        lifecycle.started()
        assert gc.get_threshold() == usual and gc.get_freeze_count() > 0
        lifecycle.end()
    else:  # a library user or a test: nothing changes
        lifecycle.skip_pydantic_plugins()
        lifecycle.started()
        lifecycle.end()
        assert gc.get_threshold() == usual and gc.get_freeze_count() == 0
        print("plugins", "skipped" if _loader._plugins == {} else "looked for at first use")
""")


def run(mode: str, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"} | env
    out = subprocess.run([sys.executable, "-c", CHECK, mode], capture_output=True, text=True, env=full, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize(("mode", "env", "plugins"), [
    ("cli", {}, "skipped"),
    ("library", {}, "looked for at first use"),
    ("cli", {"PYDANTIC_DISABLE_PLUGINS": "some_plugin"}, "looked for at first use"),
])
def test_start_and_exit_of_the_cli_only(mode: str, env: dict[str, str], plugins: str) -> None:
    assert run(mode, **env) == f"plugins {plugins}"


FRESH = textwrap.dedent("""
    import sys
    from mlrecipe.cli import lifecycle

    if sys.argv[1] == "cli":
        lifecycle.begin()
    lifecycle.skip_pydantic_plugins()
    from pydantic import BaseModel

    class Model(BaseModel):
        x: int

    assert Model(x=1).x == 1  # pydantic built a validator, asking its plugin loader for plugins
    from pydantic.plugin import _loader

    print("plugins", list(_loader.get_plugins()), "metadata", "importlib.metadata" in sys.modules)
    from pydantic.plugin._loader import PYDANTIC_ENTRY_POINT_GROUP  # another name: the real loader, plugins skipped

    print(PYDANTIC_ENTRY_POINT_GROUP, list(sys.modules["pydantic.plugin._loader"].get_plugins()))
""")


@pytest.mark.parametrize(("mode", "expected"), [
    ("cli", "plugins [] metadata False\npydantic []"),
    ("library", "plugins [] metadata True\npydantic []"),  # no plugin installed here: the scan found none
], ids=["cli", "library"])
def test_the_cli_skips_importlib_metadata_when_pydantic_has_not_loaded_its_plugin_loader(mode: str,
                                                                                        expected: str) -> None:
    full = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", FRESH, mode], capture_output=True, text=True, env=full, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


PROGRAM = textwrap.dedent("""
    import gc, sys
    sys.argv[0] = sys.argv[1]
    usual = gc.get_threshold()
    from mlrecipe.cli import app  # what the console entry imports for the lines Typer reads
    print(gc.get_threshold()[0] > usual[0])
""")


@pytest.mark.parametrize(("argv0", "raised"), [("/venv/bin/mlrecipe", "True"), ("/venv/bin/pytest", "False"),
                                               ("-c", "False")])
def test_collections_are_rare_from_the_cli_import_on_in_the_mlrecipe_program_only(argv0: str, raised: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROGRAM, argv0], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == raised
