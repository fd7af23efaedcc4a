"""What the gateway enforces, read from the ``MLRECIPE_GATEWAY`` environment variable (JSON)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

CONFIG_VAR = "MLRECIPE_GATEWAY"


@dataclass
class GatewayConfig:
    """What the gateway enforces; ``api_key_env`` / ``api_key_file`` name where the key is, never the key."""

    max_body_bytes: int = 1 << 20
    max_inflight: int = 64
    retry_after_s: int = 1
    api_key_env: str = "MLRECIPE_API_KEY"
    api_key_file: str | None = None
    tokens_window_s: float = 10.0
    server_name: str = "mlrecipe"

    @classmethod
    def from_env(cls) -> GatewayConfig:
        raw = os.environ.get(CONFIG_VAR)
        data = json.loads(raw) if raw else {}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    def api_key(self) -> str | None:
        if self.api_key_file:
            with open(os.path.expanduser(self.api_key_file), encoding="utf-8") as fh:
                key = fh.read().strip()
            return key or None
        return os.environ.get(self.api_key_env) or None
