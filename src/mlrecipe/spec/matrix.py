"""Matrix steps: a pipeline step with ``matrix:`` becomes one ordinary step per combination of its values.

Pure data, no I/O. :func:`expand_matrix` names every combination and builds the values it sets, with a
:class:`ValueSources` entry that places each value at its matrix key's line in the pipeline file, so a key
that is not a recipe field is reported there. :func:`group_heads` and :func:`wire` let the loader order and
check dependencies on the file's own steps (a cycle through a matrix step names the file's line), then
replace each matrix step by its expansions, every one waiting for all expansions of what it depends on.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlrecipe.metrics import PROGRESS_FIELDS
from mlrecipe.spec.errors import SpecIssue, format_path
from mlrecipe.spec.issues import ValueSources
from mlrecipe.spec.yamlfile import Loc, YamlDoc

if TYPE_CHECKING:
    from mlrecipe.spec.load import StepSpec
    from mlrecipe.spec.pipeline import Pipeline, PipelineStep

#: Longest step name (a DNS label, as ``PipelineStep.name`` allows).
MAX_NAME = 40
#: Most combinations one matrix step may expand to (a typo should not plan a million steps).
MAX_COMBINATIONS = 1000


@dataclass(frozen=True)
class MatrixPoint:
    """Where an expanded step came from: the pipeline step that carries the matrix, and its combination."""

    step: str
    values: tuple[tuple[str, Any], ...]  #: (matrix key, value), in the matrix's order

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass(frozen=True)
class Variant:
    """One step to build from a pipeline step: its name, the values it sets, and where they were written."""

    name: str
    values: dict[str, Any]  #: nested overlay merged over the step's values (empty without a matrix)
    point: MatrixPoint | None = None
    doc: YamlDoc | None = None  #: the matrix values laid out as a document whose lines are the pipeline's
    shown: str = ""  #: display prefix of a value's path (``steps[0].matrix``)

    def sources(self, base: ValueSources) -> ValueSources:
        """``base`` with the matrix values added last (they are merged last, so they win a tie)."""
        if self.doc is None:
            return base
        return ValueSources([*base.entries, (self.doc, (), self.shown)], base.sets)


def key_path(key: str) -> tuple[str, ...] | None:
    """The path of a ``--set`` style key (``a.b.c``; ``\\.`` is a literal dot), or ``None`` when it is not one."""
    parts = [p.replace("\0", ".") for p in key.replace("\\.", "\0").split(".")]
    if any(not p or any(c in p for c in "[]=,\\") for p in parts):
        return None
    return tuple(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _value_slug(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return _slug(str(value))
    return ""  # a mapping or a list has no short readable form: the names fall back to indexes


def _names(base: str, paths: list[tuple[str, ...]], combos: list[tuple[Any, ...]]) -> list[str]:
    """``<base>-<key>-<value>...`` for every combination when all fit and differ, else ``<base>-<index>``."""
    readable = []
    for combo in combos:
        parts = [base]
        for path, value in zip(paths, combo, strict=True):
            parts += [_slug(path[-1]), _value_slug(value)]
        readable.append("-".join(parts) if all(parts) else "")
    if all(0 < len(n) <= MAX_NAME for n in readable) and len(set(readable)) == len(readable):
        return readable
    out = []
    for index in range(len(combos)):
        suffix = f"-{index}"
        out.append(base[: MAX_NAME - len(suffix)].rstrip("-") + suffix)
    return out


def _set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = copy.deepcopy(value)


def _matrix_issues(step: PipelineStep, index: int, doc: YamlDoc) -> tuple[list[SpecIssue], list[str]]:
    """An empty matrix, a key with no values or that is no value path, overlapping keys, too many combinations;
    and the keys that are fine (their combinations are still validated, so that every problem shows at once)."""
    issues: list[SpecIssue] = []

    def add(loc: Loc, message: str) -> None:
        issues.append(SpecIssue(doc.file, doc.line_of(loc), format_path(loc), message))

    matrix = step.matrix or {}
    where: Loc = ("steps", index, "matrix")
    if not matrix:
        add(where, "an empty matrix: map at least one value path (e.g. resources.nnodes) to a list of values")
        return issues, []
    paths: dict[str, tuple[str, ...]] = {}
    for key, values in matrix.items():
        path = key_path(key)
        if path is None:
            add((*where, key), f"'{key}' is not a value path: give dotted recipe keys, e.g. resources.nnodes")
        elif not values:
            add((*where, key), "no values to sweep: give a list with at least one value")
        else:
            paths[key] = path
    good = list(paths)
    for (a, pa), (b, pb) in itertools.combinations(paths.items(), 2):
        if (pa[: len(pb)] == pb or pb[: len(pa)] == pa) and b in good:
            add((*where, b), f"overlaps matrix key '{a}': sweep one or the other")
            good.remove(b)
    count = 1
    for values in matrix.values():
        count *= max(1, len(values))
    if count > MAX_COMBINATIONS:
        add(where, f"{count} combinations, more than {MAX_COMBINATIONS}: sweep fewer values")
        good = []
    return issues, good


def _value_lines(doc: YamlDoc, index: int, key: str, path: tuple[str, ...]) -> list[dict[Loc, int]]:
    """For each value of one matrix key: the lines of its insides, keyed by their path in the recipe."""
    prefix: Loc = ("steps", index, "matrix", key)
    count = len((doc.data["steps"][index].get("matrix") or {}).get(key) or [])
    out: list[dict[Loc, int]] = [{} for _ in range(count)]
    for loc, line in doc.lines.items():
        if len(loc) > len(prefix) + 1 and loc[: len(prefix)] == prefix and isinstance(loc[len(prefix)], int):
            position = loc[len(prefix)]
            if isinstance(position, int) and position < count:
                out[position][(*path, *loc[len(prefix) + 1:])] = line
    return out


def _variants(step: PipelineStep, index: int, doc: YamlDoc) -> list[Variant]:
    matrix = step.matrix or {}
    keys = list(matrix)
    paths = [key_path(k) or (k,) for k in keys]
    key_lines = {k: doc.line_of(("steps", index, "matrix", k)) or 0 for k in keys}
    insides = [_value_lines(doc, index, k, p) for k, p in zip(keys, paths, strict=True)]
    positions = list(itertools.product(*(range(len(matrix[k])) for k in keys)))
    combos = [tuple(matrix[k][j] for k, j in zip(keys, pos, strict=True)) for pos in positions]
    names = _names(step.name, paths, combos)
    out = []
    for name, pos, combo in zip(names, positions, combos, strict=True):
        overlay: dict[str, Any] = {}
        lines: dict[Loc, int] = {}
        for k, path, j, value, inside in zip(keys, paths, pos, combo, insides, strict=True):
            _set_path(overlay, path, value)
            for depth in range(1, len(path) + 1):
                lines.setdefault(path[:depth], key_lines[k])
            lines.update(inside[j])
        point = MatrixPoint(step.name, tuple(zip(keys, combo, strict=True)))
        out.append(Variant(name, overlay, point, YamlDoc(doc.file, overlay, lines), f"steps[{index}].matrix"))
    return out


def expand_matrix(pipeline: Pipeline, doc: YamlDoc) -> tuple[list[list[Variant]], list[SpecIssue]]:
    """The steps to build for each pipeline step (the step itself, or one per combination) and the matrix
    problems: bad matrices, expanded names that clash with other steps, a ``sweep`` without a matrix."""
    issues: list[SpecIssue] = []
    out: list[list[Variant]] = []
    for index, step in enumerate(pipeline.steps):
        if step.matrix is None:
            out.append([Variant(step.name, {})])
            continue
        problems, good = _matrix_issues(step, index, doc)
        issues += problems
        if good:
            fine = step.model_copy(update={"matrix": {k: v for k, v in step.matrix.items() if k in good}})
            out.append(_variants(fine, index, doc))
        else:
            out.append([Variant(step.name, {})])
    taken: dict[str, int] = {}
    for index, step in enumerate(pipeline.steps):
        taken.setdefault(step.name, index)
    for index, variants in enumerate(out):
        if pipeline.steps[index].matrix is None:
            continue
        for variant in variants:
            other = taken.setdefault(variant.name, index)
            if other != index:
                loc: Loc = ("steps", index, "matrix")
                issues.append(SpecIssue(doc.file, doc.line_of(loc), format_path(loc),
                                        f"expands to step '{variant.name}', a name steps[{other}] already has"))
    if pipeline.sweep is not None:
        problem = _sweep_problem(pipeline, pipeline.sweep.rank_by)
        if problem:
            loc = ("sweep", "rank_by")
            issues.append(SpecIssue(doc.file, doc.line_of(loc), format_path(loc), problem))
    return out, issues


def _sweep_problem(pipeline: Pipeline, rank_by: str) -> str | None:
    """What is wrong with ``sweep.rank_by`` before anything runs, or None."""
    if not any(s.matrix is not None for s in pipeline.steps):
        return "a metric to rank by, but no step has a matrix to sweep"
    if rank_by in PROGRESS_FIELDS:
        return (f"unknown metric '{rank_by}': a field of every progress line, not a metric; name one "
                "the steps report under \"metrics\" (e.g. loss, eval_loss)")
    return None


def _group(step: StepSpec) -> str:
    return step.matrix.step if step.matrix is not None else step.name


def group_heads(steps: Sequence[StepSpec]) -> list[StepSpec]:
    """One step per pipeline step, under the pipeline step's own name (what ``depends_on`` names)."""
    if all(s.matrix is None for s in steps):
        return list(steps)
    heads: dict[str, StepSpec] = {}
    for step in steps:
        if _group(step) not in heads:
            heads[_group(step)] = dataclasses.replace(step, name=_group(step))
    return list(heads.values())


def wire(ordered_heads: Sequence[StepSpec], steps: Sequence[StepSpec]) -> list[StepSpec]:
    """The expanded steps in the order of ``ordered_heads``, each depending on every expansion of what its
    pipeline step depends on. With a matrix, every step gets explicit dependencies (a pipeline without
    ``depends_on`` keeps its file order between pipeline steps, and a matrix step's expansions run side by side)."""
    if all(s.matrix is None for s in steps):
        return list(ordered_heads)
    members: dict[str, list[StepSpec]] = {}
    for step in steps:
        members.setdefault(_group(step), []).append(step)
    explicit = any(h.declares_depends_on or h.depends_on for h in ordered_heads)

    def names(group: str) -> list[str]:
        return [m.name for m in members[group]]

    out: list[StepSpec] = []
    previous: list[str] = []
    for head in ordered_heads:
        needs = [n for dep in head.depends_on for n in names(dep)] if explicit else previous
        out += [dataclasses.replace(m, depends_on=tuple(needs)) for m in members[head.name]]
        previous = names(head.name)
    return out
