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
    """Parse ``local://default/quickstart/train`` or ``quickstart``; explicit options fill the gaps."""
    if "://" in text:
        scheme, _, rest = text.partition("://")
        parts = [p for p in rest.split("/") if p]
        if len(parts) < 2:
            raise ValueError(f"'{text}': expected <backend>://<namespace>/<release>[/<step>]")
        return Address(parts[1], scheme or backend, parts[0] or namespace, parts[2] if len(parts) > 2 else None)
    return Address(text, backend, namespace)
