"""Which names are credentials (whole words of the name, not substrings), and credentials that are numbers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mlrecipe.backends.kubernetes.secrets import split_values
from mlrecipe.credentials import is_secret_name, redact_env
from mlrecipe.runner.recorded_inputs import SECRETS_KEY, redact
from mlrecipe.spec.load import load_step_release
from tests.repo import BIN, cli_env

CREDENTIALS = ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "DB_PASSWORD", "GITHUB_PAT",
               "API_KEY", "MLRECIPE_API_KEY", "OPENAI_APIKEY", "SSH_PRIVATE_KEY", "hf_token", "hfToken", "apiKey",
               "HUGGING_FACE_HUB_TOKEN", "MYSQL_PASSWD", "CLIENT_SECRET", "GOOGLE_APPLICATION_CREDENTIALS"]
INNOCENT = ["TOKENIZER_MODEL", "TOKENIZERS_PARALLELISM", "MAX_TOKENS", "max_new_tokens", "PATH", "PWD", "KEY",
            "HF_HOME", "PATCH_SIZE", "SECRETARY", "PASSWORDLESS_MODE", "MODE", "KEYS_DIR"]


@pytest.mark.parametrize("name", CREDENTIALS)
def test_credential_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", INNOCENT)
def test_innocent_names_are_not_credentials(name: str) -> None:
    assert not is_secret_name(name)


def test_innocent_names_are_neither_masked_nor_moved_into_a_kubernetes_secret() -> None:
    env = {"TOKENIZER_MODEL": "/fsx/tok", "TOKENIZERS_PARALLELISM": "false", "MAX_TOKENS": "64", "HF_TOKEN": "hf_x"}
    assert redact_env(env) == {**env, "HF_TOKEN": "******"}
    values = {"train": {"env": [{"name": k, "value": v} for k, v in env.items()]}}
    plain, secret = split_values(values)
    assert secret == {"HF_TOKEN": "hf_x"}
    assert {"name": "TOKENIZER_MODEL", "value": "/fsx/tok"} in plain["train"]["env"]


def recipe(tmp_path: Path) -> Path:
    check = tmp_path / "check.py"
    check.write_text("import os\nassert os.environ['DB_PASSWORD'] == '31415926'\nprint('password ok')\n",
                     encoding="utf-8")
    path = tmp_path / "recipe.yaml"
    path.write_text(f"image: python:3.11\npvc: []\nprocess:\n  command: [python3, {check}]\n", encoding="utf-8")
    return path


def test_a_tokenizer_path_set_on_the_command_line_is_recorded_as_given(tmp_path: Path) -> None:
    sets = ["process.env[0].name=TOKENIZER_MODEL", "process.env[0].value=/fsx/tokenizer"]
    spec = load_step_release("rel", "data-prep/data-process", [str(recipe(tmp_path))], sets)
    assert redact({"sets": sets}, spec) == {"sets": sets}  # nothing for resume to ask back


def test_a_numeric_credential_is_recorded_as_a_variable(tmp_path: Path) -> None:
    sets = ["process.env[0].name=DB_PASSWORD", "process.env[0].value=31415926"]
    spec = load_step_release("rel", "data-prep/data-process", [str(recipe(tmp_path))], sets)
    assert redact({"sets": sets}, spec) == {"sets": [sets[0], "process.env[0].value=${DB_PASSWORD}"],
                                            SECRETS_KEY: [{"index": 1, "env": "DB_PASSWORD"}]}


@pytest.mark.integration
def test_a_numeric_credential_never_reaches_the_state_and_resume_asks_for_it(tmp_path: Path, mlhome: Path) -> None:
    env = cli_env(mlhome)
    env.pop("DB_PASSWORD", None)
    argv = [str(BIN / "mlrecipe"), "install", "num", "data-prep/data-process", "-f", str(recipe(tmp_path)),
            "--set", "process.env[0].name=DB_PASSWORD", "--set", "process.env[0].value=31415926"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = {p: p.read_text(encoding="utf-8", errors="replace") for p in mlhome.rglob("*") if p.is_file()}
    assert "password ok" in "".join(stored.values())  # the step got the value
    assert not [p for p, text in stored.items() if "31415926" in text]
    state = json.loads((mlhome / "releases/local/default/num/state.json").read_text(encoding="utf-8"))
    assert state["inputs"][SECRETS_KEY] == [{"env": "DB_PASSWORD", "index": 1}]
    state_file = mlhome / "releases/local/default/num/state.json"
    state["state"] = "failed"  # so that resume runs it again
    state_file.write_text(json.dumps(state), encoding="utf-8")
    refused = subprocess.run([str(BIN / "mlrecipe"), "resume", "num"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert refused.returncode == 2 and "export DB_PASSWORD" in refused.stderr
    resumed = subprocess.run([str(BIN / "mlrecipe"), "resume", "num"], capture_output=True, text=True,
                             env={**env, "DB_PASSWORD": "31415926"}, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "31415926" not in state_file.read_text(encoding="utf-8")
