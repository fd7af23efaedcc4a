"""Shared fixtures (an isolated MLRECIPE_HOME per test) and the rules that keep the suite's shape honest.

- A test that starts a real process (``subprocess``, ``os.system``, ``fork``/``exec``/``posix_spawn``, in the test,
  its fixtures or the code it calls) is marked ``integration``; one that is not fails, so ``make test-fast``
  (``-m "not integration"``) runs none.
- With ``CI=true`` a skip is a failure: CI builds every environment the suite uses (``make test``), so a skip there
  means a missing environment or tool. Skips that say a test needs an NVIDIA GPU (CI never has one), or that
  it cannot apply where the environment is complete (``KEPT_SKIPS``), stay skips.

- ``make test`` runs the suite on two xdist workers, one test file at a time per worker (``--dist loadfile``: a
  module's fixtures are made once), and ``tests/slurm`` in a process of its own beside the workers: its files share
  one test cluster on fixed ports (xdist 3.8's ``loadgroup`` cannot group them: it renames ``item._nodeid``, which
  pytest 9 no longer reads).
- On the xdist workers the files of ``SLOWEST_FILES`` come first, then the other files that start processes, then
  the rest; and xdist takes the files in that order (its default takes the files with most tests first, which left
  the slowest, one-test files for last: one worker ran them for a minute or two while the other had nothing left).

Test modules import helpers from plain modules (``tests/repo.py``, ``tests/golden.py``, a folder's helper module),
never from another test module or a conftest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.repo import BIN, EXAMPLES, REPO, cli_env  # noqa: F401  (for test modules not yet importing tests.repo)

#: Audit events of a new process (https://docs.python.org/3/library/audit_events.html).
SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec", "os.fork",
                          "os.forkpty", "pty.spawn"})
#: Skip reasons (substrings) that stay skips with CI=true.
KEPT_SKIPS = ("needs an NVIDIA GPU", "are all installed here", "this interpreter has kfp", "is on GitHub only")
IN_CI = os.environ.get("CI", "").lower() in ("true", "1", "yes")
#: The slowest test files of ``make test`` (their tests' durations added up, from its ``--durations`` list), slowest
#: first: the xdist workers start with them, so the last files left are short ones and both workers end together.
SLOWEST_FILES = (
    "tests/integration/test_framework_examples.py", "tests/integration/test_local_backend.py",
    "tests/integration/test_ray_local.py", "tests/frameworks/test_ray_train_multimodal.py",
    "tests/frameworks/test_accelerate_pipeline.py", "tests/integration/test_megatron_example.py",
    "tests/frameworks/test_ray_train_pipeline.py", "tests/serve/test_dead_engine_rayserve.py",
    "tests/serve/test_rayserve_framework.py", "tests/serve/test_rayserve_local.py", "tests/serve/test_vllm_server.py",
    "tests/serve/test_vllm_encoders.py", "tests/kubelet_runs/test_ray.py", "tests/kubelet_runs/test_plants.py",
    "tests/frameworks/test_nemo2_scripts.py",
)

_spawned: list[str] = []  # what the current test (not marked integration) started
_watching = False


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _watching and event in SPAWN_EVENTS:
        what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1]
        _spawned.append(f"{event} {what!r}"[:200])


sys.addaudithook(_audit)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="write the golden files of the tests that run (the only way golden files are written); review the diff",
    )


def pytest_configure(config: pytest.Config) -> None:
    if IN_CI:  # a module skipped for a missing environment is a collection error there: report it, run the rest
        config.option.continue_on_collection_errors = True
    if getattr(config.option, "dist", "no") == "loadfile":  # the files in the workers' order (the slowest first)
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: the files of ``SLOWEST_FILES`` first (in its order), then the files with a test that
    starts processes, then the others; each file's tests keep their order."""
    if not hasattr(config, "workerinput"):
        return
    rank: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        integration = item.get_closest_marker("integration") is not None
        if path in SLOWEST_FILES:
            rank[path] = SLOWEST_FILES.index(path)
        elif integration or path not in rank:
            rank[path] = len(SLOWEST_FILES) + (0 if integration else 1)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _watching
    _spawned.clear()
    _watching = item.get_closest_marker("integration") is None
    try:
        yield
    finally:
        _watching = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _watching
    if nextitem is None:  # the session's fixtures (a test cluster) end here too, whichever test the session ran last
        _watching = False
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if _spawned and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} starts real processes but is not marked integration (make test-fast runs "
                           f"none): mark it @pytest.mark.integration. Started: {'; '.join(_spawned[:3])}")
        _spawned.clear()
    _fail_a_skip_in_ci(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _fail_a_skip_in_ci(outcome.get_result())


def _fail_a_skip_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not (IN_CI and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(kept in reason for kept in KEPT_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped in CI (CI=true), where every test environment is built: {reason}"


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True with ``--update-golden``: golden tests write their files (see tests/golden.py)."""
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def mlhome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``MLRECIPE_HOME`` (state, volumes) for one test."""
    home = tmp_path / "mlhome"
    monkeypatch.setenv("MLRECIPE_HOME", str(home))
    return home
