"""Credentials: which environment variables (and values keys) hold them, and keeping their values out of plans,
requests, tags, state and logs. This module is the one rule; every writer asks it (docs/configuration.md, section
"Credentials", has the table).

A name is split into words (at ``_``, ``-``, ``.`` and camelCase humps, compared without case) and is:

- **secret** when a word is a credential word (``TOKEN``, ``SECRET(S)``, ``PASSWORD``, ``PASSWD``, ``PASSPHRASE``,
  ``APIKEY``, ``PAT``, ``CREDENTIAL(S)``, ``CREDS``), a word ends in one (``PGPASSWORD``, ``GHTOKEN``), ``PWD`` or
  ``PASS`` ends a name of several words (``MYSQL_PWD``, ``DB_PASS``; ``PWD`` alone is the shell's directory), two
  adjacent words make one (``API KEY``, ``ACCESS KEY``, ``CONNECTION STRING``, ``WEBHOOK URL``, ...), or the name
  ends in ``KEY`` after a known provider or a word that makes a key secret (``KAGGLE_KEY``, ``SIGNING_KEY``);
- **plain** when none of that holds, or it ends in ``KEY`` after a word that names a lookup key (``SORT_KEY``,
  ``PARTITION_KEY``, ``PUBLIC_KEY``); a credential word inside a longer word does not count (``TOKENIZER_MODEL``,
  ``TOKENIZERS_PARALLELISM``, ``MAX_TOKENS``, ``PGPASSFILE``);
- **ambiguous** when it ends in ``KEY`` after any other word (``ROUTER_KEY``): it is refused where a recipe sets it
  (:func:`ambiguity`), with the way out: ``MLRECIPE_SECRET_NAMES`` or ``MLRECIPE_PLAIN_NAMES`` (comma-separated names
  in the environment of the ``mlrecipe`` command) say which it is. Should one reach a writer, it is kept as secret.

A value is a credential whatever its name when it carries a password in a URL (``postgres://u:pw@host/db``,
``https://user:tok@pypi.example/simple``) or has the form of a well-known token (``hf_...``, ``ghp_...``,
``AKIA...``, a PEM private key): :func:`is_secret` is the test for a name with its value.
"""

from __future__ import annotations

import enum
import itertools
import os
import re

#: Words that make a name a credential's on their own.
SECRET_WORDS = frozenset({"TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE", "APIKEY",
                          "PAT", "CREDENTIAL", "CREDENTIALS", "CREDS"})
#: Endings of a longer word that make it a credential word (``PGPASSWORD``, ``CLIENTSECRET``, ``GHTOKEN``).
SECRET_ENDINGS = ("PASSWORD", "PASSWD", "TOKEN", "SECRET", "SECRETS", "APIKEY", "CREDENTIALS")
#: Words that make a name of several words a credential's when they end it (``PWD`` alone is the shell's).
SECRET_LAST_WORDS = frozenset({"PWD", "PASS"})
#: Adjacent word pairs that make a name a credential's.
SECRET_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("AUTH", "KEY"),
                          ("ACCOUNT", "KEY"), ("CONNECTION", "STRING"), ("WEBHOOK", "URL"), ("AUTH", "HEADER")})
#: Words before a final ``KEY`` (or ``KEYS``) that make it a secret key: providers and kinds of keys.
SECRET_KEY_OWNERS = frozenset({
    "KAGGLE", "OPENAI", "ANTHROPIC", "COHERE", "MISTRAL", "GROQ", "GEMINI", "HF", "HUGGINGFACE", "WANDB", "COMET",
    "NEPTUNE", "NGC", "REPLICATE", "TOGETHER", "PINECONE", "SENDGRID", "MAILGUN", "STRIPE", "TWILIO", "ALGOLIA",
    "DATADOG", "DD", "NEWRELIC", "LICENSE", "MASTER", "SIGNING", "ENCRYPTION", "DECRYPTION", "HMAC", "JWT", "SSH",
    "GPG", "PGP", "DEPLOY", "SERVICE", "SESSION", "CLIENT", "APP", "APPLICATION", "STORAGE", "SAS", "SHARED",
    "SUBSCRIPTION", "FERNET", "CIPHER", "AES", "RSA", "TLS", "SSL", "MINIO", "B2", "SPACES", "R2"})
#: Words before a final ``KEY`` that make it a lookup key, not a credential.
PLAIN_KEY_OWNERS = frozenset({
    "SORT", "PARTITION", "PRIMARY", "FOREIGN", "CACHE", "OBJECT", "S3", "ROUTING", "LABEL", "LABELS", "TEXT",
    "INPUT", "OUTPUT", "TARGET", "COLUMN", "ID", "SHARD", "GROUP", "METRIC", "DICT", "HASH", "LOOKUP", "JOIN",
    "IMAGE", "PROMPT", "PUBLIC", "PUB", "MAP", "DATA", "DATASET", "FEATURE", "SPLIT", "CONFIG", "SEED", "PRNG", "RNG",
    "RESPONSE", "MESSAGE", "FIELD", "JSON", "BATCH", "SAMPLE", "INDEX", "TABLE", "RESULT", "RESULTS", "SORTING",
    "UNIQUE", "DEDUP", "CERTIFICATE", "CERT", "IDEMPOTENCY", "QUEUE", "TOPIC", "EVENT", "CONTEXT", "HOT", "MODIFIER",
    "SHORTCUT"})
MASK = "******"
#: Environment variables of the ``mlrecipe`` command that settle ambiguous names: comma-separated names.
SECRET_NAMES_VAR = "MLRECIPE_SECRET_NAMES"
PLAIN_NAMES_VAR = "MLRECIPE_PLAIN_NAMES"

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
#: A URL whose user information holds a password: ``scheme://user:password@host``.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:)[^/@\s]+@")
#: Well-known token formats (Hugging Face, GitHub, GitLab, OpenAI-style, Slack, AWS key ids, npm, PyPI).
_TOKEN_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|(AKIA|ASIA)[A-Z0-9]{16}|npm_[A-Za-z0-9]{36}"
    r"|pypi-[A-Za-z0-9_-]{50,})|-----BEGIN [A-Z ]*PRIVATE KEY-----")


class Kind(enum.Enum):
    """What a name says about its value."""

    PLAIN = "plain"
    SECRET = "secret"
    AMBIGUOUS = "ambiguous"


def name_words(name: str) -> list[str]:
    """The words of a variable or key name, upper case: ``hfApiKey`` and ``HF_API_KEY`` give HF, API, KEY."""
    return [w.upper() for part in re.split(r"[^A-Za-z0-9]+", name) for w in _WORD.findall(part)]


def _declared(var: str) -> frozenset[str]:
    return frozenset(n.strip() for n in os.environ.get(var, "").split(",") if n.strip())


def name_kind(name: str) -> Kind:
    """Whether ``name`` (an environment variable or a values key) holds a credential: the rule of this module,
    then the declarations of :data:`SECRET_NAMES_VAR` and :data:`PLAIN_NAMES_VAR`."""
    kind = _rule(name)
    if kind is not Kind.SECRET and name in _declared(SECRET_NAMES_VAR):
        return Kind.SECRET
    if kind is Kind.AMBIGUOUS and name in _declared(PLAIN_NAMES_VAR):
        return Kind.PLAIN
    return kind


def _rule(name: str) -> Kind:
    words = name_words(name)
    if any(w in SECRET_WORDS or (len(w) > 6 and w.endswith(SECRET_ENDINGS)) for w in words):
        return Kind.SECRET
    if len(words) > 1 and words[-1] in SECRET_LAST_WORDS:
        return Kind.SECRET
    if any(p in SECRET_PAIRS for p in itertools.pairwise(words)):
        return Kind.SECRET
    if len(words) > 1 and words[-1] in ("KEY", "KEYS"):
        owner = words[-3] + words[-2] if words[-2].isdigit() and len(words) > 2 else words[-2]  # S3, B2
        if owner in SECRET_KEY_OWNERS:
            return Kind.SECRET
        return Kind.PLAIN if owner in PLAIN_KEY_OWNERS else Kind.AMBIGUOUS
    return Kind.PLAIN


def is_secret_name(name: str) -> bool:
    """Whether an environment variable (or a values key) called ``name`` holds a credential (an ambiguous name
    counts: what cannot be told apart is kept out)."""
    return name_kind(name) is not Kind.PLAIN


def is_secret_value(value: object) -> bool:
    """Whether ``value`` is a credential whatever its name: a password in a URL, or a well-known token's form."""
    return isinstance(value, str) and bool(_URL_PASSWORD.search(value) or _TOKEN_VALUE.search(value))


def is_secret(name: str, value: object) -> bool:
    """Whether the variable ``name`` set to ``value`` must be kept out of what is written (an empty value is not)."""
    if value is None or value == "":
        return False
    return is_secret_name(name) or is_secret_value(value)


def ambiguity(name: str) -> str:
    """Why ``name`` is refused, with the way out; "" when the rule (or a declaration) settles it."""
    if name_kind(name) is not Kind.AMBIGUOUS:
        return ""
    return (f"{name} may hold a credential (a name ending in KEY), and mlrecipe will not guess: say which with "
            f"{SECRET_NAMES_VAR}={name} (kept out of plans, requests and state) or {PLAIN_NAMES_VAR}={name} "
            "(written as given) in the environment of mlrecipe, or rename it")


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the values of credentials (by name or by value) replaced by a mask."""
    return {k: (MASK if is_secret(k, v) else v) for k, v in env.items()}


def redact_text(text: str) -> str:
    """``text`` with passwords in URLs and well-known tokens masked (for messages and logs of the CLI)."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)
    return _TOKEN_VALUE.sub(MASK, text)
