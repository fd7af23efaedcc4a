"""Credentials: which environment variables hold them, and keeping their values out of plans, state and manifests.

A name is a credential's when one of its words is a credential word (``HF_TOKEN``, ``DB_PASSWORD``,
``GITHUB_PAT``) or two adjacent words make one (``WANDB_API_KEY``, ``AWS_ACCESS_KEY_ID``). Words are the parts of
the name split on ``_``, ``-``, ``.`` and at camelCase humps, compared without case; a credential word inside a
longer word does not count (``TOKENIZER_MODEL``, ``TOKENIZERS_PARALLELISM``, ``MAX_TOKENS`` are not credentials).
"""

from __future__ import annotations

import itertools
import re

#: Words that make a name a credential's on their own.
SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "PAT", "CREDENTIAL", "CREDENTIALS"})
#: Adjacent word pairs that make a name a credential's.
SECRET_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("AUTH", "KEY")})
MASK = "******"

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def name_words(name: str) -> list[str]:
    """The words of a variable or key name, upper case: ``hfApiKey`` and ``HF_API_KEY`` give HF, API, KEY."""
    return [w.upper() for part in re.split(r"[^A-Za-z0-9]+", name) for w in _WORD.findall(part)]


def is_secret_name(name: str) -> bool:
    """Whether an environment variable (or a values key) called ``name`` holds a credential."""
    words = name_words(name)
    return any(w in SECRET_WORDS for w in words) or any(p in SECRET_PAIRS for p in itertools.pairwise(words))


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the values of credential-like variables replaced by a mask."""
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}
