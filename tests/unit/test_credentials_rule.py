"""The one credential rule (``mlrecipe.credentials``) over the names real tools use for secrets, the names that only
look like them, the ambiguous class and its way out, and values that are credentials whatever their name."""

from __future__ import annotations

import pytest

from mlrecipe.credentials import (
    MASK,
    PLAIN_NAMES_VAR,
    SECRET_NAMES_VAR,
    Kind,
    ambiguity,
    is_secret,
    is_secret_name,
    is_secret_value,
    name_kind,
    redact_env,
    redact_text,
)
from tests.secret_names import REAL_SECRET_NAMES

#: Names that contain a credential word, or look like one, and hold none.
PLAIN_NAMES = [
    "TOKENIZER_MODEL", "TOKENIZERS_PARALLELISM", "MAX_TOKENS", "max_new_tokens", "TOKENIZER_PATH", "PATH", "PWD",
    "OLDPWD", "KEY", "KEY_COLUMN", "KEYS_DIR", "SORT_KEY", "PARTITION_KEY", "PRIMARY_KEY", "PUBLIC_KEY", "S3_KEY",
    "CACHE_KEY", "LABEL_KEY", "TEXT_KEY", "PGPASSFILE", "PGHOST", "PGUSER", "MYSQL_HOST", "HF_HOME",
    "HF_HUB_OFFLINE", "WANDB_PROJECT", "PATCH_SIZE", "SECRETARY", "PASSWORDLESS_MODE", "PASSTHROUGH", "DATABASE_URL",
    "PIP_INDEX_URL", "MLRECIPE_TRAIN_URL", "SSL_CERTIFICATE_KEY", "KEYBOARD_LAYOUT", "MONKEY_PATCH",
]
AMBIGUOUS_NAMES = ["ROUTER_KEY", "MY_KEY", "TEAM_KEYS", "VAULT_KEY"]


@pytest.mark.parametrize("name", REAL_SECRET_NAMES)
def test_real_secret_names_are_credentials(name: str) -> None:
    assert name_kind(name) is Kind.SECRET and is_secret_name(name)


def test_the_list_is_long_enough() -> None:
    assert len(set(REAL_SECRET_NAMES)) >= 50


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_names_that_merely_contain_a_credential_word_stay_plain(name: str) -> None:
    assert name_kind(name) is Kind.PLAIN and not is_secret_name(name)


@pytest.mark.parametrize("name", AMBIGUOUS_NAMES)
def test_an_ambiguous_name_is_refused_with_the_way_out_and_kept_out_meanwhile(name: str) -> None:
    assert name_kind(name) is Kind.AMBIGUOUS
    assert is_secret_name(name)  # should one reach a writer, it is masked
    why = ambiguity(name)
    assert f"{SECRET_NAMES_VAR}={name}" in why and f"{PLAIN_NAMES_VAR}={name}" in why


def test_declarations_settle_an_ambiguous_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLAIN_NAMES_VAR, "ROUTER_KEY, OTHER")
    monkeypatch.setenv(SECRET_NAMES_VAR, "MY_KEY,MODEL_NAME")
    assert name_kind("ROUTER_KEY") is Kind.PLAIN and ambiguity("ROUTER_KEY") == ""
    assert name_kind("MY_KEY") is Kind.SECRET and ambiguity("MY_KEY") == ""
    assert name_kind("MODEL_NAME") is Kind.SECRET  # any name may be declared a credential
    monkeypatch.setenv(PLAIN_NAMES_VAR, "HF_TOKEN")
    assert name_kind("HF_TOKEN") is Kind.SECRET  # a plain declaration never unmasks what the rule calls secret


@pytest.mark.parametrize("value", [
    "postgres://ml:s3cr3t@db.internal:5432/runs", "https://user:pypi-tok@pypi.example.com/simple",
    "redis://:pw@cache:6379/0", "hf_" + "a" * 34, "ghp_" + "b" * 36, "AKIAABCDEFGHIJKLMNOP", "sk-" + "c" * 40,
    "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
])
def test_values_that_are_credentials_whatever_their_name(value: str) -> None:
    assert is_secret_value(value) and is_secret("DATABASE_URL", value)
    assert redact_env({"DATABASE_URL": value, "N": "3"}) == {"DATABASE_URL": MASK, "N": "3"}


@pytest.mark.parametrize("value", ["postgres://ml@db.internal/runs", "https://pypi.org/simple", "/fsx/tokenizer",
                                   "s3://bucket/key", "http://[::1]:8000/x", "user@example.com", ""])
def test_plain_values_stay_plain(value: str) -> None:
    assert not is_secret_value(value) and not is_secret("DATABASE_URL", value)


def test_an_empty_credential_is_not_masked() -> None:
    assert not is_secret("HF_TOKEN", "") and redact_env({"HF_TOKEN": ""}) == {"HF_TOKEN": ""}


def test_redact_text_masks_passwords_in_urls_and_tokens() -> None:
    text = redact_text("error: cannot reach postgres://ml:s3cr3t@db/x with hf_" + "a" * 34)
    assert "s3cr3t" not in text and "hf_aaaa" not in text and "postgres://ml:******@db/x" in text
