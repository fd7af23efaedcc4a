"""Credentials given with --set never reach the release's state; resume takes them back from the environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mlrecipe.errors import UserError
from mlrecipe.runner.recorded_inputs import SECRETS_KEY, redact, restore
from mlrecipe.spec.load import load_step_release
from mlrecipe.spec.values import parse_sets
from tests.repo import BIN, cli_env

TOKEN = "hf_q9Zr1tLk8sVw"
SETS = ["process.env[0].name=HF_TOKEN", f"process.env[0].value={TOKEN}", "resources.nnodes=1"]


def recipe(tmp_path: Path) -> Path:
    check = tmp_path / "check.py"
    flag = tmp_path / "failed-once"  # the first run fails after checking the token, so that resume runs it again
    check.write_text(f"import os, pathlib, sys\nassert os.environ['HF_TOKEN'] == {TOKEN!r}, 'token not passed'\n"
                     f"print('token ok')\nflag = pathlib.Path({str(flag)!r})\n"
                     "sys.exit(0 if flag.exists() else flag.touch() or 3)\n", encoding="utf-8")
    path = tmp_path / "recipe.yaml"
    path.write_text(f"image: python:3.11\npvc: []\nprocess:\n  command: [python3, {check}]\n", encoding="utf-8")
    return path


def test_sets_on_one_list_item_merge_as_helm_does() -> None:
    assert parse_sets(SETS[:2]) == {"process": {"env": [{"name": "HF_TOKEN", "value": TOKEN}]}}


def test_a_credential_is_recorded_as_a_variable_and_restored_from_it(tmp_path: Path) -> None:
    spec = load_step_release("rel", "data-prep/data-process", [str(recipe(tmp_path))], SETS)
    inputs = {"kind": "install", "sets": SETS}
    recorded = redact(inputs, spec)
    assert TOKEN not in json.dumps(recorded)
    assert recorded["sets"][1] == "process.env[0].value=${HF_TOKEN}" and recorded["sets"][2] == SETS[2]
    assert recorded[SECRETS_KEY] == [{"index": 1, "env": "HF_TOKEN"}]
    assert restore(recorded, {"HF_TOKEN": TOKEN}) == inputs
    with pytest.raises(UserError, match="export HF_TOKEN"):
        restore(recorded, {})


def test_a_credential_named_key_is_redacted_too(tmp_path: Path) -> None:
    spec = load_step_release("rel", "data-prep/data-process", [str(recipe(tmp_path))],
                             ["process.env[0].name=WANDB_API_KEY", "process.env[0].value=abc123xyz"])
    recorded = redact({"sets": ["process.env[0].name=WANDB_API_KEY", "process.env[0].value=abc123xyz"]}, spec)
    assert "abc123xyz" not in json.dumps(recorded) and recorded[SECRETS_KEY][0]["env"] == "WANDB_API_KEY"


def test_without_credentials_the_inputs_are_recorded_as_given(tmp_path: Path) -> None:
    spec = load_step_release("rel", "data-prep/data-process", [str(recipe(tmp_path))], ["resources.nnodes=1"])
    assert redact({"sets": ["resources.nnodes=1"]}, spec) == {"sets": ["resources.nnodes=1"]}


@pytest.mark.integration
def test_install_and_resume_keep_the_token_out_of_the_state(tmp_path: Path, mlhome: Path) -> None:
    env = cli_env(mlhome)
    env.pop("HF_TOKEN", None)
    base = [str(BIN / "mlrecipe"), "install", "tok", "data-prep/data-process", "-f", str(recipe(tmp_path))]
    sets = [a for s in SETS for a in ("--set", s)]
    done = subprocess.run([*base, *sets], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # the step's first run exits 3 once it saw the token
    stored = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in mlhome.rglob("*") if p.is_file())
    assert "token ok" in stored and TOKEN not in stored
    refused = subprocess.run([str(BIN / "mlrecipe"), "resume", "tok"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert refused.returncode == 2 and "export HF_TOKEN" in refused.stdout + refused.stderr
    resumed = subprocess.run([str(BIN / "mlrecipe"), "resume", "tok"], capture_output=True, text=True,
                             env={**env, "HF_TOKEN": TOKEN}, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    stored = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in mlhome.rglob("*") if p.is_file())
    assert TOKEN not in stored and "token ok" in stored
