"""Chain mode: the rest of a pipeline submitted at once as jobs that depend on each other (``afterok``).

The runner still drives the release step by step: when it submits the first step, the backend
submits that step and every later one (those the runner will not skip), each with
``--dependency=afterok:<previous job>``; when the runner reaches a later step, the backend attaches
to that step's queued job instead of submitting it again. Any divergence (a changed script, a step
the chain skipped) cancels the rest of the chain and submits a new one from there. A serving step ends
a chain (it never completes): the steps after it start a new chain once the server is ready, and the
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
    step: str
    job_id: str
    digest: str


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


def later_steps(ctx: ReleaseContext, step: str) -> list:
    """The steps after ``step`` that the runner will run (not skipped as unchanged), from the state record."""
    from mlrecipe.runner.release import spec_from_inputs
    from mlrecipe.runner.state import load_record

    record = load_record(ctx.backend, ctx.namespace, ctx.release)
    if record is None or not record.inputs:
        return []
    spec = spec_from_inputs(record.inputs)
    names = [s.name for s in spec.steps]
    if step not in names:
        return []
    out = []
    for s in spec.steps[names.index(step) + 1:]:
        prev = record.steps.get(s.name)
        if prev is not None and prev.state == "succeeded" and prev.hash == s.content_hash:
            continue
        out.append(s)
    return out


def steps_from(ctx: ReleaseContext, step: str) -> set[str]:
    """``step`` and every step after it in the pipeline (whether or not the runner will skip them)."""
    from mlrecipe.runner.state import load_record

    record = load_record(ctx.backend, ctx.namespace, ctx.release)
    order = list(record.order) if record is not None and record.order else []
    return set(order[order.index(step):]) if step in order else {step}
