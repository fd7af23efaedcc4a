"""Commands that read: validate, schema, status, list, logs."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path

from mlrecipe.cli.address import parse_address
from mlrecipe.cli.output import emit_json, fail, print_spec_error
from mlrecipe.spec.errors import SpecError


def validate(file: Path, chart: str | None, out: str) -> int:
    """Validate a pipeline (and the recipes it names) or a recipe for ``chart``."""
    from mlrecipe.spec.load import is_pipeline_file, load_pipeline, load_step_release

    try:
        if chart is None and is_pipeline_file(file):
            spec = load_pipeline(file)
        elif chart is None:
            raise SpecError.single(str(file), "this is a recipe: name its chart with --chart CHART")
        else:
            spec = load_step_release("validate", chart, [str(file)])
    except SpecError as exc:
        if out == "json":
            emit_json({"valid": False, "errors": [vars(i) for i in exc.issues]})
        else:
            print_spec_error(exc)
        return 2
    if out == "json":
        emit_json({"valid": True, "steps": [{"name": s.name, "chart": s.chart.name} for s in spec.steps]})
    else:
        print(f"{file}: valid ({len(spec.steps)} step(s): {', '.join(s.name for s in spec.steps)})")
    return 0


def schema(kind: str) -> int:
    """Print the JSON Schema of a recipe or a pipeline."""
    from mlrecipe.spec.pipeline import Pipeline
    from mlrecipe.spec.recipe import Recipe

    models = {"recipe": Recipe, "pipeline": Pipeline}
    if kind not in models:
        return fail(f"unknown schema '{kind}': use recipe or pipeline")
    print(json.dumps(models[kind].model_json_schema(), indent=2))
    return 0


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def status(release: str | None, namespace: str | None, backend: str | None, out: str) -> int:
    """Show one release in detail, or all releases in a table."""
    from mlrecipe.cli.execute import _summary
    from mlrecipe.runner.state import all_records, find_records

    if release is None:
        records = all_records()
    else:
        addr = parse_address(release, namespace, backend)
        records = find_records(addr.release, addr.namespace, addr.backend)
        if not records:
            return fail(f"release '{release}' not found (see 'mlrecipe list')", 1)
    if out == "json":
        emit_json([_summary(r) for r in records])
        return 0
    if not records:
        print("no releases")
        return 0
    for r in records:
        print(f"{r.backend}://{r.namespace}/{r.release}  {r.effective_state()}  updated {_when(r.updated)}")
        if release is not None:
            for name in r.order:
                s = r.steps.get(name)
                if s is None:
                    print(f"  {name:<20} pending")
                    continue
                extra = f"  {s.message}" if s.message else ""
                url = f"  {s.url}" if s.url else ""
                print(f"  {name:<20} {s.state:<12} {s.chart}{url}{extra}")
    return 0


def logs(release: str, step: str | None, follow: bool, rank: int, namespace: str | None, backend: str | None) -> int:
    """Print (and follow) the log of node ``rank`` of a step."""
    from mlrecipe.backends.base import ReleaseContext
    from mlrecipe.backends.registry import get_backend
    from mlrecipe.runner.state import find_records

    addr = parse_address(release, namespace, backend)
    records = find_records(addr.release, addr.namespace, addr.backend)
    if not records:
        return fail(f"release '{release}' not found (see 'mlrecipe list')", 1)
    record = records[0]
    step = step or addr.step
    if step is None:
        ran = [n for n in record.order if n in record.steps]
        if not ran:
            return fail(f"release '{release}' has not started a step yet", 1)
        step = ran[-1]
    if step not in record.order:
        return fail(f"release '{release}' has no step '{step}' (steps: {', '.join(record.order)})")
    impl = get_backend(record.backend)
    ctx = ReleaseContext(record.release, record.namespace, record.backend, record.directory)
    path = impl.log_path(ctx, step, rank)
    if not path.exists():
        return fail(f"no log for step '{step}' rank {rank} yet ({path})", 1)
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            if not follow:
                return 0
            current = find_records(record.release, record.namespace, record.backend)
            if not current or not current[0].driver_alive():
                sys.stdout.buffer.write(fh.read())
                sys.stdout.flush()
                return 0
            time.sleep(0.25)
