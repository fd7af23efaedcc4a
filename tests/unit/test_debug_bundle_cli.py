"""``mlrecipe debug-bundle``: bad input is one error line and exit 2 with nothing written; what cannot be collected
is named in MANIFEST.txt with why; every file is scrubbed of credential values (in process, no node runs)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.runner.bundle import scrubber
from mlrecipe.runner.state import ReleaseRecord, StepRecord
from mlrecipe.states import StepState

TOKEN = "ghp_" + "A" * 36


def _record() -> ReleaseRecord:
    record = ReleaseRecord("rel", "default", "local", {}, state=StepState.FAILED, order=["train", "eval"],
                           steps={"train": StepRecord("train", "data-prep/data-process", state=StepState.FAILED,
                                                      backend="local")})
    record.save()
    step_dir = record.directory / "steps" / "train"
    step_dir.mkdir(parents=True)
    (step_dir / "node-0.log").write_text(f"cloning https://bob:hunter2hunter2@git.example/x.git with {TOKEN}\n")
    (step_dir / "node-1.log").write_text(f"rank 1: MY_DB_PASSWORD is {os.environ['MY_DB_PASSWORD']}\n")
    return record


@pytest.fixture
def in_tmp(tmp_path: Path, mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_DB_PASSWORD", "s3cr3t-from-env")
    _record()
    return tmp_path


@pytest.mark.parametrize("args,said", [
    (["nope"], "error: release 'nope' not found (see 'mlrecipe list')"),
    (["rel", "deploy"], "error: release 'rel' has no step 'deploy' (steps: train, eval)"),
    (["local://default/rel/deploy"], "error: release 'local://default/rel/deploy' has no step 'deploy'"),
    (["bogus://default/rel"], "error: release address 'bogus://default/rel': unknown backend 'bogus'"),
    (["rel", "-o", "missing/dir/b.tar.gz"], "the directory missing/dir does not exist"),
    (["rel", "-o", "."], "is a directory: name the bundle's file"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(in_tmp: Path, args: list[str], said: str) -> None:
    before = sorted(p.name for p in in_tmp.iterdir())
    result = CliRunner().invoke(app, ["debug-bundle", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(p.name for p in in_tmp.iterdir()) == before, "nothing written"


def test_what_cannot_be_collected_is_named_and_credentials_are_masked(in_tmp: Path) -> None:
    result = CliRunner().invoke(app, ["debug-bundle", "rel"])
    assert result.exit_code == 0, result.output
    (written,) = in_tmp.glob("rel-debug-*.tar.gz")
    assert result.stdout == f"{written}\n"
    with tarfile.open(written) as tar:
        root = written.name.removesuffix(".tar.gz")
        members = {m.name: (tar.extractfile(m) or b"").read() for m in tar.getmembers()}
    assert set(members) >= {f"{root}/MANIFEST.txt", f"{root}/state.json", f"{root}/steps/train/node-0.log",
                            f"{root}/steps/train/node-1.log", f"{root}/versions.txt"}
    manifest = members[f"{root}/MANIFEST.txt"].decode()
    assert "plans/template.txt: the release's recorded inputs cannot be loaded now" in manifest
    assert "environment/train.env:" in manifest
    assert members[f"{root}/steps/train/node-0.log"] == b"cloning https://bob:******@git.example/x.git with ******\n"
    assert members[f"{root}/steps/train/node-1.log"] == b"rank 1: MY_DB_PASSWORD is ******\n"
    assert not any(b"s3cr3t-from-env" in data or b"hunter2" in data or TOKEN.encode() in data
                   for data in members.values())


def test_the_scrubber_masks_known_values_and_token_forms_and_leaves_binary_alone() -> None:
    scrub = scrubber({"longsecretvalue", "longsecret", "ab"})
    assert scrub(b"a longsecretvalue and a longsecret, ab stays") == b"a ****** and a ******, ab stays", \
        "the longest first; values of fewer than 4 characters are not searched for"
    assert scrub(b"\xff\xfe longsecret") == b"\xff\xfe ******"
    assert scrub(f"token {TOKEN}".encode()) == b"token ******"
