"""Release addresses that cannot name a release, and state records that cannot be read: exit 2, said plainly."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from mlrecipe.backends.base import StepState
from mlrecipe.cli.app import app
from mlrecipe.runner.state import ReleaseRecord, StepRecord

VERBS = [["status"], ["logs"], ["uninstall"], ["resume"]]
BAD = {
    "local://default": "is incomplete",
    "local://foo": "is incomplete",
    "://x/y": "names no backend",
    "nosuch://a/b": "unknown backend 'nosuch'",
    "local://default/rel/step/more": "has too many parts",
    "local://../rel": "invalid namespace '..'",
}


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: v[0])
@pytest.mark.parametrize(("address", "why"), BAD.items())
def test_a_malformed_address_is_exit_2_saying_why(mlhome: Path, verb: list[str], address: str, why: str) -> None:
    result = CliRunner().invoke(app, [*verb, address])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert f"error: release address '{address}'" in result.output and why in result.output


def test_resume_of_a_release_this_home_lacks_says_how_to_adopt_it(mlhome: Path) -> None:
    result = CliRunner().invoke(app, ["resume", "elsewhere"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"error: release 'elsewhere' not found in {mlhome}" in text
    assert "Run its pipeline again (mlrecipe run FILE" in text and "adopted, never started twice" in text
    assert not mlhome.exists()


def plant_truncated(mlhome: Path) -> Path:
    directory = mlhome / "releases" / "local" / "default" / "rel"
    directory.mkdir(parents=True)
    whole = json.dumps({"release": "rel", "namespace": "default", "backend": "local", "inputs": {}, "state": "failed"})
    (directory / "state.json").write_text(whole[:40], encoding="utf-8")
    return directory


def test_list_shows_a_corrupt_record(mlhome: Path) -> None:
    plant_truncated(mlhome)
    text = CliRunner().invoke(app, ["list"])
    assert text.exit_code == 0 and "local://default/rel  corrupt" in text.output, text.output
    doc = CliRunner().invoke(app, ["list", "-o", "json"])
    assert doc.exit_code == 0
    [entry] = json.loads(doc.output)
    assert entry["address"] == "local://default/rel" and entry["state"] == "corrupt"


@pytest.mark.parametrize("verb", [*VERBS, ["status", "local://default/rel"]], ids=lambda v: "-".join(v))
def test_a_corrupt_record_is_named_with_a_way_out(mlhome: Path, verb: list[str]) -> None:
    directory = plant_truncated(mlhome)
    result = CliRunner().invoke(app, [*verb, "rel"] if len(verb) == 1 else verb)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert "error: the state record of release local://default/rel is corrupt (not valid JSON)" in result.output
    assert f"move {directory} away" in result.output
    assert (directory / "state.json").exists()


@pytest.mark.parametrize("how", ["install", "run"])
def test_running_over_a_corrupt_record_is_refused(tmp_path: Path, mlhome: Path, how: str) -> None:
    directory = plant_truncated(mlhome)
    (tmp_path / "recipe.yaml").write_text("image: python:3.11\npvc: []\nprocess:\n  command: [echo, hi]\n",
                                          encoding="utf-8")
    (tmp_path / "pipeline.yaml").write_text("release: rel\nsteps:\n  - {name: s, chart: data-prep/data-process, "
                                            "recipe: recipe.yaml}\n", encoding="utf-8")
    argv = (["install", "rel", "data-prep/data-process", "-f", str(tmp_path / "recipe.yaml")] if how == "install"
            else ["run", str(tmp_path / "pipeline.yaml")])
    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert "is corrupt (not valid JSON)" in result.output
    assert not (directory / "steps").exists()


def test_following_a_log_stops_with_one_error_when_the_record_turns_corrupt(mlhome: Path) -> None:
    me = psutil.Process(os.getpid())
    record = ReleaseRecord("rel", "default", "local", {}, state=StepState.RUNNING, order=["s"],
                           steps={"s": StepRecord("s", "data-prep/data-process", state=StepState.RUNNING)},
                           driver_pid=me.pid, driver_created=me.create_time())
    record.save()
    log = record.directory / "steps" / "s" / "node-0.log"
    log.parent.mkdir(parents=True)
    log.write_text("first line\n", encoding="utf-8")

    def corrupt() -> None:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write("last line\n")
        text = (record.directory / "state.json").read_text(encoding="utf-8")
        (record.directory / "state.json").write_text(text[:40], encoding="utf-8")

    timer = threading.Timer(0.6, corrupt)
    timer.start()
    try:
        result = CliRunner().invoke(app, ["logs", "-f", "rel", "s"])
    finally:
        timer.cancel()
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert "first line\nlast line\n" in result.output
    assert "error: the state record of release local://default/rel is corrupt (not valid JSON)" in result.output
    assert str(record.directory / "state.json") in result.output and "Traceback" not in result.output
