"""Chain mode: the rest of a pipeline submitted at once as jobs that depend on each other (``afterok``).

The runner still drives the release step by step: when it submits the first step, the backend
submits that step and every later one the runner says it will run (``ReleaseContext.upcoming``: the
runner's own skip rule decides), each with ``--dependency=afterok:<previous job>``; when the runner
reaches a later step, the backend attaches to that step's queued job instead of submitting it again,
whatever state the job is in when this driver queued it (a job that failed fast is reported, not
resubmitted). Any divergence (a changed script, a step the chain skipped, a failed job an earlier run
queued) cancels the rest of the chain and submits a new one from there. A serving step ends a chain
(it never completes): the steps after it start a new chain once the server is ready, and the
server's job stays. The chain is recorded in ``<release state dir>/slurm-chain.json``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from mlrecipe.backends.base import ReleaseContext

CHAIN_FILE = "slurm-chain.json"


@dataclass
class ChainEntry:
    """One queued job of the chain; ``run`` names the driver process that submitted it."""

    step: str
    job_id: str
    digest: str
    run: str = ""


def _path(ctx: ReleaseContext) -> Path:
    return ctx.state_dir / CHAIN_FILE


def load(ctx: ReleaseContext) -> list[ChainEntry]:
    try:
        return [ChainEntry(**e) for e in json.loads(_path(ctx).read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return []


def save(ctx: ReleaseContext, entries: list[ChainEntry]) -> None:
    path = _path(ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{CHAIN_FILE}.tmp")
    tmp.write_text(json.dumps([asdict(e) for e in entries], indent=2), encoding="utf-8")
    tmp.replace(path)


def steps_from(ctx: ReleaseContext, step: str) -> set[str]:
    """``step`` and every step after it in the pipeline (whether or not the runner will skip them)."""
    order = list(ctx.pipeline)
    return set(order[order.index(step):]) if step in order else {step}
