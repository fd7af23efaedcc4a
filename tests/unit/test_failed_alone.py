"""``make test`` runs the workers' failed tests again alone only when the cache names tests; a failure of xdist
itself (the cache holds ``gw1``) or no cache at all names none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import failed_alone


@pytest.mark.parametrize(("recorded", "found"), [
    ({"tests/unit/test_x.py::test_a[1]": True, "tests/unit/test_y.py": True},
     ["tests/unit/test_x.py::test_a[1]", "tests/unit/test_y.py"]),
    ({"gw1": True}, []), ({"tests/unit/test_x.py::test_a": True, "gw0": True}, []), ({}, []), (None, []),
])
def test_only_recorded_tests_are_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           recorded: dict[str, bool] | None, found: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    if recorded is not None:
        failed_alone.LASTFAILED.parent.mkdir(parents=True)
        failed_alone.LASTFAILED.write_text(json.dumps(recorded))
    assert failed_alone.failed_tests() == found


def test_nothing_to_run_again_is_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert failed_alone.main([]) == 1
    assert "no failed test is recorded" in capsys.readouterr().out
