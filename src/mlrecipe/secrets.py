"""Keeping secrets out of printed plans: env values whose names look like credentials are masked."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL", re.I)
MASK = "******"


def is_secret_name(name: str) -> bool:
    """Whether an environment variable called ``name`` probably holds a credential."""
    return bool(SECRET_NAME.search(name))


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the values of credential-like variables replaced by a mask."""
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}
