"""Release addresses: ``<backend>://<namespace>/<release>[/<step>]`` or a bare release name."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Address:
    release: str
    backend: str | None = None
    namespace: str | None = None
    step: str | None = None

    def __str__(self) -> str:
        base = f"{self.backend or '*'}://{self.namespace or '*'}/{self.release}"
        return f"{base}/{self.step}" if self.step else base


def parse_address(text: str, namespace: str | None = None, backend: str | None = None) -> Address:
    """Parse ``local://default/quickstart/train`` or ``quickstart``; explicit options fill the gaps.

    Raises :class:`UserError` (exit 2) for an address that cannot name a release: an unknown or missing backend,
    a missing namespace or release, more parts than a step, or a name that no release can have.
    """
    import re

    from mlrecipe.backends.registry import BACKENDS
    from mlrecipe.errors import UserError
    from mlrecipe.spec.names import NAME_PATTERN

    form = "<backend>://<namespace>/<release>[/<step>] or a release name"
    if "://" not in text:
        parts, scheme = [text], backend
    else:
        scheme, _, rest = text.partition("://")
        parts = rest.split("/")
        if parts and parts[-1] == "" and len(parts) > 1:
            parts.pop()  # a trailing slash
        if not scheme:
            raise UserError(f"release address '{text}' names no backend: expected {form}")
        if len(parts) < 2:
            raise UserError(f"release address '{text}' is incomplete: expected {form}")
        if len(parts) > 3:
            raise UserError(f"release address '{text}' has too many parts: expected {form}")
    if scheme is not None and scheme not in BACKENDS:
        raise UserError(f"release address '{text}': unknown backend '{scheme}' (known: {', '.join(sorted(BACKENDS))})")
    names = dict(zip(("namespace", "release", "step"), parts, strict=False)) if len(parts) > 1 else {"release": text}
    for what, name in names.items():
        if not re.match(NAME_PATTERN, name):
            raise UserError(f"release address '{text}': invalid {what} '{name}' (lowercase letters, digits and '-')")
    return Address(names["release"], scheme, names.get("namespace") or namespace, names.get("step"))
