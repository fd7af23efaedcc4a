"""``make test`` runs the workers' failed tests again alone only when the cache names tests; a failure of xdist
itself (the cache holds ``gw1``) or no cache at all names none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import failed_alone


def record(cache_dir: Path, recorded: dict[str, bool]) -> None:
    lastfailed = cache_dir / "v" / "cache" / "lastfailed"
    lastfailed.parent.mkdir(parents=True)
    lastfailed.write_text(json.dumps(recorded))


@pytest.mark.parametrize(("recorded", "found"), [
    ({"tests/unit/test_x.py::test_a[1]": True, "tests/unit/test_y.py": True},
     ["tests/unit/test_x.py::test_a[1]", "tests/unit/test_y.py"]),
    ({"gw1": True}, []), ({"tests/unit/test_x.py::test_a": True, "gw0": True}, []), ({}, []), (None, []),
])
def test_only_recorded_tests_are_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           recorded: dict[str, bool] | None, found: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    if recorded is not None:
        record(failed_alone.DEFAULT_CACHE, recorded)
    assert failed_alone.failed_tests() == found


def test_nothing_to_run_again_is_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert failed_alone.main([]) == 1
    assert "no failed test is recorded" in capsys.readouterr().out


def test_a_run_with_its_own_cache_dir_is_read_there_and_rerun_with_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The Slurm tests beside the workers keep their own cache: their failures run again from it, not the workers'."""
    monkeypatch.chdir(tmp_path)
    record(failed_alone.DEFAULT_CACHE, {"tests/unit/test_workers.py::test_w": True})
    record(tmp_path / "slurm-cache", {"tests/slurm/test_s.py::test_chain": True})
    calls: list[list[str]] = []
    monkeypatch.setattr(failed_alone.subprocess, "call", lambda argv: calls.append(argv) or 0)
    assert failed_alone.main(["--cache-dir", str(tmp_path / "slurm-cache"), "-m", "not ray", "tests/slurm"]) == 0
    assert calls[0][3:] == ["-q", "--last-failed", "-o", f"cache_dir={tmp_path / 'slurm-cache'}", "-m", "not ray",
                            "tests/slurm"]
