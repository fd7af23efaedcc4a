"""Turning validation errors into :class:`SpecIssue` s that name the file, line and field path."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from mlrecipe.spec import recipe as recipe_models
from mlrecipe.spec.errors import SpecIssue, format_path
from mlrecipe.spec.yamlfile import Loc, YamlDoc

#: Where a value given with ``--set`` is reported (its field path names the expression's key).
SET_SOURCE = "--set"


@dataclass
class ValueSources:
    """Where each value came from, to name the file and line of an error."""

    entries: list[tuple[YamlDoc, Loc, str]] = field(default_factory=list)  # doc, loc prefix, display prefix
    #: The ``--set`` values of the step and their display prefix (a pipeline's step name): a value one of them
    #: gave (merged after the files) is reported as ``--set: <path>``.
    sets: tuple[YamlDoc, str] | None = None

    def locate(self, loc: Loc) -> tuple[str, int | None, str]:
        best: tuple[int, int, YamlDoc, Loc, str] | None = None
        for order, (doc, prefix, shown) in enumerate(self.entries):
            full = tuple(prefix) + tuple(loc)
            depth = len(full)
            while depth >= len(prefix):
                if full[:depth] in doc.lines:
                    break
                depth -= 1
            if depth < len(prefix) or full[:depth] not in doc.lines:
                continue
            score = (depth - len(prefix), order)
            if best is None or score >= best[:2]:
                best = (*score, doc, prefix, shown)
        if self.sets is not None and any(tuple(loc[:d]) in self.sets[0].lines for d in range(1, len(loc) + 1)):
            return SET_SOURCE, None, _join(self.sets[1], loc)
        if best is None:
            if not self.entries:
                return "<input>", None, format_path(loc)
            doc, prefix, shown = self.entries[0]
            return doc.file, doc.line_of(prefix), _join(shown, loc)
        _, _, doc, prefix, shown = best
        return doc.file, doc.line_of(tuple(prefix) + tuple(loc)), _join(shown, loc)


def set_values_doc(values: Any) -> YamlDoc:
    """The values ``--set`` gave, as a document that knows the path of each value it gave whole: every value but
    the mappings, which merge with the files' (for :attr:`ValueSources.sets`)."""
    lines: dict[Loc, int] = {}

    def walk(node: Any, loc: Loc) -> None:
        if not isinstance(node, dict):
            lines[loc] = 0
            return
        for key, item in node.items():
            walk(item, (*loc, key))

    walk(values, ())
    return YamlDoc(SET_SOURCE, values, lines)


def _join(shown: str, loc: Loc) -> str:
    tail = format_path(loc)
    if not shown:
        return tail
    if not tail:
        return shown
    return f"{shown}{tail}" if tail.startswith("[") else f"{shown}.{tail}"


def _known_fields() -> set[str]:
    from mlrecipe.spec import pipeline as pipeline_models

    names: set[str] = set()
    for obj in [*vars(recipe_models).values(), *vars(pipeline_models).values()]:
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            for fname, finfo in obj.model_fields.items():
                names.add(fname)
                alias = finfo.validation_alias
                for choice in getattr(alias, "choices", []) or []:
                    names.add(str(choice))
    return names


def _clean_loc(loc: tuple[Any, ...], data: Any, keep_last: bool) -> Loc:
    out: list[str | int] = []
    cur = data
    for i, part in enumerate(loc):
        in_dict = isinstance(cur, dict) and part in cur
        if in_dict or (isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)):
            out.append(part)
            cur = cur[part]
        elif keep_last and i == len(loc) - 1:
            out.append(part)
    return tuple(out)


def _message(err: ErrorDetails) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(err["loc"][-1])
        known = _known_fields()
        if key in known:  # a real key in the wrong block (nnodes at the top instead of under resources)
            return f"unknown key '{key}' here (it is a key of another block)"
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if kind == "missing":
        return "required field is missing"
    msg = err["msg"].replace("Input should be", "must be").replace("Value error, ", "")
    if "input" in err and kind not in ("model_type", "dict_type", "list_type"):
        return f"{msg}, got {_shown(err['input'])}"
    return msg


def _shown(value: Any) -> str:
    """A short repr of a refused value (an integer of thousands of digits has no decimal repr)."""
    if isinstance(value, dict | list):
        return type(value).__name__
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of {value.bit_length():,} bits"
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:77]}..."


def pydantic_issues(exc: ValidationError, data: Any, sources: ValueSources) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    seen: set[tuple[Loc, str]] = set()
    for err in exc.errors():
        loc = _clean_loc(err["loc"], data, keep_last=err["type"] in ("missing", "extra_forbidden"))
        msg = _message(err)
        if (loc, msg) in seen:
            continue
        seen.add((loc, msg))
        file, line, path = sources.locate(loc)
        issues.append(SpecIssue(file, line, path, msg))
    return issues
