"""The CLI's cheap start and exit (:mod:`mlrecipe.cli.lifecycle`): rare collections while it starts, the usual pace
once it waits, pydantic's plugin scan skipped in the CLI only. Each case runs in a fresh interpreter (the collector
and pydantic's plugin cache are process-wide)."""

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
