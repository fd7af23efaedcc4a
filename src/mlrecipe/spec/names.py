"""The pattern of release, namespace and step names (DNS-label-like), on its own so that reading an address does
not load the pipeline models."""

from __future__ import annotations

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
