"""The inputs a release records for ``resume``, without the credentials given on the command line.

A ``--set`` that carries a credential (by :mod:`mlrecipe.credentials`' rule: the value of an environment variable
whose name or value says so, e.g. ``--set train.env[0].value=hf_...`` for ``HF_TOKEN``, or a value under a key such as
``hf_token``) is recorded with
the credential replaced by ``${NAME}``; ``resume`` takes it back from the environment variable ``NAME`` and stops
with exit 2, saying what to export, when that variable is not set. Nothing else changes: recipe files are
recorded by path, and the other ``--set`` expressions as given.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from mlrecipe.credentials import is_secret, is_secret_name, is_secret_value
from mlrecipe.errors import UserError
from mlrecipe.spec.load import ReleaseSpec

SECRETS_KEY = "secret_sets"  #: in the recorded inputs: [{"index": i, "env": NAME}, ...]
BACKEND_OPTS_KEY = "backend_opts"  #: in the recorded inputs: the -B expressions given (no credential among them)


def _scalar_text(value: Any) -> str:
    """A credential's text as a ``--set`` gives it: a string, or a number YAML read from one; "" for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError:  # an int past Python's 4,300-digit limit: no --set gives one back as text
            return ""
    return ""


def _secret_values(node: Any) -> Iterator[tuple[str, str]]:
    """(variable name, value) of every credential in a step's values: env entries and credential-named keys."""
    if isinstance(node, dict):
        name = node.get("name")
        if isinstance(name, str) and is_secret(name, _scalar_text(node.get("value"))):
            yield name, _scalar_text(node["value"])
        for k, v in node.items():
            if k not in ("name", "value") and is_secret(str(k), _scalar_text(v)):
                yield re.sub(r"\W", "_", str(k)).upper(), _scalar_text(v)
            elif isinstance(v, dict | list):
                yield from _secret_values(v)
    elif isinstance(node, list):
        for item in node:
            yield from _secret_values(item)


def credentials(spec: ReleaseSpec) -> dict[str, str]:
    """Credential value -> the environment variable that gives it back on ``resume``, over every step."""
    found: dict[str, str] = {}
    for step in spec.steps:
        for name, value in _secret_values(step.values):
            found.setdefault(value, name)
    return found


def _plain_option(expr: str) -> bool:
    """Whether a ``-B`` expression may be recorded: none of its keys or values is a credential's."""
    for item in expr.split(","):
        key, _, value = item.partition("=")
        if is_secret_name(key) or is_secret_value(value):
            return False
    return True


def with_backend_opts(inputs: dict[str, Any], opts: list[str]) -> dict[str, Any]:
    """``inputs`` with the ``-B`` expressions of this command after those recorded (a later one wins)."""
    return {**inputs, BACKEND_OPTS_KEY: [*recorded_backend_opts(inputs), *opts]} if opts else inputs


def recorded_backend_opts(inputs: dict[str, Any]) -> list[str]:
    """The ``-B`` expressions a release was started (or resumed) with, for ``resume``, ``uninstall``, ``status`` and
    ``logs`` to apply before their own (``-B mode=local`` need not be repeated)."""
    opts = inputs.get(BACKEND_OPTS_KEY)
    return [str(o) for o in opts] if isinstance(opts, list) else []


def redact(inputs: dict[str, Any], spec: ReleaseSpec) -> dict[str, Any]:
    """``inputs`` as they may be written to disk: each credential in a ``--set`` replaced by ``${NAME}``, ``-B``
    expressions that carry a credential left out (``resume`` takes them from its own ``-B`` again)."""
    if BACKEND_OPTS_KEY in inputs:
        inputs = {**inputs, BACKEND_OPTS_KEY: [o for o in recorded_backend_opts(inputs) if _plain_option(o)]}
    secrets = credentials(spec)
    sets: list[str] = []
    marks: list[dict[str, Any]] = []
    for index, expr in enumerate(inputs.get("sets") or []):
        key, sep, value = expr.partition("=")
        for secret, name in secrets.items():
            if sep and secret in value:
                value = value.replace(secret, "${" + name + "}")
                marks.append({"index": index, "env": name})
        sets.append(f"{key}{sep}{value}")
    if not marks:
        return {k: v for k, v in inputs.items() if k != SECRETS_KEY}
    return {**inputs, "sets": sets, SECRETS_KEY: marks}


def restore(inputs: dict[str, Any], environ: dict[str, str]) -> dict[str, Any]:
    """Recorded ``inputs`` with their credentials taken back from ``environ`` (for ``resume``).

    Raises :class:`UserError` (exit 2) naming the variables to export when some are not set.
    """
    marks = inputs.get(SECRETS_KEY) or []
    missing = sorted({m["env"] for m in marks if m["env"] not in environ})
    if missing:
        raise UserError(f"this release was started with credentials in --set, which are not kept on disk: export "
                        f"{', '.join(missing)} with the same value{'s' if len(missing) > 1 else ''} and run "
                        "resume again")
    sets = list(inputs.get("sets") or [])
    for mark in marks:
        key, sep, value = sets[mark["index"]].partition("=")
        sets[mark["index"]] = f"{key}{sep}{value.replace('${' + mark['env'] + '}', environ[mark['env']])}"
    return {**{k: v for k, v in inputs.items() if k != SECRETS_KEY}, "sets": sets}
