"""The gateway's Prometheus metrics (text format, no client library): requests by route, method and status,
latency, generated tokens (total and per second over a sliding window), requests in flight, rejections."""

from __future__ import annotations

import json
import time
from collections import deque

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Routes counted under their own label; any other path is "other" (the label set stays bounded).
ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models", "/v2/generate",
          "/v2/generate_stream", "/v2", "/health", "/metrics")


def route_label(path: str) -> str:
    """The ``route`` label of a request path."""
    if path.startswith("/v2/models/"):
        if path.endswith("/generate_stream"):
            return "/v2/generate_stream"
        return "/v2/generate" if path.endswith("/generate") else "/v2"
    if path.startswith("/v2"):
        return "/v2"
    return path if path in ROUTES else "other"


def stream_tokens(chunk: bytes) -> int:
    """Streamed chunks that carry generated text (about one token each on vLLM)."""
    return chunk.count(b'"text":"') + chunk.count(b'"content":"') - chunk.count(b'"text":""') \
        - chunk.count(b'"content":""')


def usage_tokens(body: bytes) -> int:
    """``usage.completion_tokens`` of a JSON response body, 0 when it has none."""
    try:
        usage = json.loads(body).get("usage") or {}
        return int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0


class Metrics:
    """Counters, gauges and a histogram in the Prometheus text format (no client library needed)."""

    def __init__(self, window_s: float) -> None:
        self.requests: dict[tuple[str, str, int], int] = {}
        self.latency: dict[str, list[float]] = {}
        self.latency_sum: dict[str, float] = {}
        self.latency_count: dict[str, int] = {}
        self.tokens_total = 0
        self.rejected: dict[str, int] = {}
        self.inflight = 0
        self.window_s = window_s
        self._recent: deque[tuple[float, int]] = deque()

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        buckets = self.latency.setdefault(route, [0.0] * len(LATENCY_BUCKETS))
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                buckets[i] += 1
        self.latency_sum[route] = self.latency_sum.get(route, 0.0) + seconds
        self.latency_count[route] = self.latency_count.get(route, 0) + 1

    def reject(self, reason: str) -> None:
        """Count a request the gateway refused for ``reason``."""
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def add_tokens(self, n: int) -> None:
        if n > 0:
            self.tokens_total += n
            now = time.monotonic()
            self._recent.append((now, n))
            self._forget_before(now - self.window_s)

    def _forget_before(self, cutoff: float) -> None:
        while self._recent and self._recent[0][0] < cutoff:
            self._recent.popleft()

    def tokens_per_second(self) -> float:
        self._forget_before(time.monotonic() - self.window_s)
        return sum(n for _, n in self._recent) / self.window_s

    def render(self) -> str:
        out = ["# HELP mlrecipe_requests_total HTTP requests through the gateway, by route, method and status.",
               "# TYPE mlrecipe_requests_total counter"]
        for (route, method, status), n in sorted(self.requests.items()):
            out.append(f'mlrecipe_requests_total{{route="{route}",method="{method}",status="{status}"}} {n}')
        out += ["# HELP mlrecipe_request_duration_seconds Request latency (to the last byte), by route.",
                "# TYPE mlrecipe_request_duration_seconds histogram"]
        for route, buckets in sorted(self.latency.items()):
            for bound, hits in zip(LATENCY_BUCKETS, buckets, strict=True):
                out.append(f'mlrecipe_request_duration_seconds_bucket{{route="{route}",le="{bound}"}} {hits:.0f}')
            count = self.latency_count[route]
            out.append(f'mlrecipe_request_duration_seconds_bucket{{route="{route}",le="+Inf"}} {count}')
            out.append(f'mlrecipe_request_duration_seconds_sum{{route="{route}"}} {self.latency_sum[route]:.6f}')
            out.append(f'mlrecipe_request_duration_seconds_count{{route="{route}"}} {count}')
        out += ["# HELP mlrecipe_generated_tokens_total Generated tokens (usage; one per streamed chunk).",
                "# TYPE mlrecipe_generated_tokens_total counter",
                f"mlrecipe_generated_tokens_total {self.tokens_total}",
                f"# HELP mlrecipe_generated_tokens_per_second Generated tokens per second over {self.window_s:g}s.",
                "# TYPE mlrecipe_generated_tokens_per_second gauge",
                f"mlrecipe_generated_tokens_per_second {self.tokens_per_second():.3f}",
                "# HELP mlrecipe_queue_depth Generation requests admitted and not finished (queued or running).",
                "# TYPE mlrecipe_queue_depth gauge",
                f"mlrecipe_queue_depth {self.inflight}",
                "# HELP mlrecipe_rejected_total Requests refused by the gateway, by reason.",
                "# TYPE mlrecipe_rejected_total counter"]
        for reason, n in sorted(self.rejected.items()):
            out.append(f'mlrecipe_rejected_total{{reason="{reason}"}} {n}')
        return "\n".join(out) + "\n"
