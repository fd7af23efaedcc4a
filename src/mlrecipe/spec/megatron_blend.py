"""A pipeline check for Megatron pretraining: the training blend may name only shards the data step produces.

A data step runs ``data/prepare.py`` with ``--file-numbers`` (``0-5``, ``0,3,7-9``) and ``--output-prefix`` (default
``pile``): it writes ``<prefix>_NN_text_document.bin/.idx`` for those numbers only. A step that depends on it
(directly or through others) and passes ``--data-path`` naming ``<prefix>_NN_text_document`` for an ``NN`` outside
them would fail at run time after the data step's hours of work; ``validate`` refuses it at the argument's line.
Words holding shell expansions are read as written (``$DATA/pile_07_text_document`` names shard 7).
The megatron entry of the framework registry (:mod:`mlrecipe.spec.frameworks`) registers :func:`blend_issues` as its
pipeline check.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlrecipe.errors import SpecIssue

if TYPE_CHECKING:
    from mlrecipe.spec.load import ReleaseSpec, StepSpec

PREPARE = "data/prepare.py"
DEFAULT_PREFIX = "pile"
SHARD = re.compile(r"^(?P<prefix>.+)_(?P<number>\d+)_text_document$")


def parse_file_numbers(text: str) -> frozenset[int] | None:
    """``"0-5"`` / ``"0,3,7-9"`` -> the numbers; None when the text is not of that form (a variable, say)."""
    numbers: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            return None
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            return None
        numbers.update(range(first, last + 1))
    return frozenset(numbers)


def _words(step: StepSpec) -> Iterator[tuple[str, str]]:
    """(value path, shell word) of the step's command and args, each fragment split as the shell would."""
    block = step.recipe.launcher is None and step.block
    if not block:
        for word in _split(" ".join(step.command_line)):
            yield "", word
        return
    for field in ("command", "args"):
        for i, fragment in enumerate(getattr(block, field)):
            for word in _split(str(fragment)):
                yield f"{step.chart.block}.{field}[{i}]", word


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def _flag(words: list[tuple[str, str]], name: str) -> tuple[str, str] | None:
    for i, (path, word) in enumerate(words):
        if word == name and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(name + "="):
            return path, word.split("=", 1)[1]
    return None


@dataclass(frozen=True)
class DataStep:
    name: str
    prefix: str
    numbers: frozenset[int]
    written: str


def _data_step(step: StepSpec) -> DataStep | None:
    words = list(_words(step))
    if not any(word.endswith(PREPARE) for _, word in words):
        return None
    given = _flag(words, "--file-numbers")
    numbers = parse_file_numbers(given[1]) if given else None
    if numbers is None or given is None:
        return None
    prefix = _flag(words, "--output-prefix")
    return DataStep(step.name, prefix[1] if prefix else DEFAULT_PREFIX, numbers, given[1])


def _blend(words: list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(value path, prefix word) of each dataset a ``--data-path`` blend names."""
    for i, (_, word) in enumerate(words):
        if word != "--data-path" and not word.startswith("--data-path="):
            continue
        rest = [(words[i][0], word.split("=", 1)[1])] if "=" in word else []
        for path, value in [*rest, *words[i + 1:]]:
            if value.startswith("--"):
                break
            if not re.fullmatch(r"[\d.eE+-]+", value):
                yield path, value


def blend_issues(spec: ReleaseSpec) -> list[SpecIssue]:
    """Every ``--data-path`` shard of a step that no data step it depends on can produce."""
    data = {s.name: d for s in spec.steps if (d := _data_step(s)) is not None}
    if not data:
        return []
    deps = spec.dependencies()
    issues: list[SpecIssue] = []
    for step in spec.steps:
        upstream, todo = set(), list(deps.get(step.name, ()))
        while todo:
            name = todo.pop()
            if name not in upstream:
                upstream.add(name)
                todo.extend(deps.get(name, ()))
        sources = [data[name] for name in upstream if name in data]
        if not sources:
            continue
        for path, word in _blend(list(_words(step))):
            match = SHARD.match(word.rstrip("/").rsplit("/", 1)[-1])
            if not match:
                continue
            prefix, number = match.group("prefix"), int(match.group("number"))
            makers = [d for d in sources if d.prefix == prefix]
            if any(number in d.numbers for d in makers):
                continue
            made = "; ".join(f"step '{d.name}' writes {d.prefix}_NN_text_document for --file-numbers {d.written}"
                             for d in sources)
            message = (f"--data-path names {match.group(0)}, which no data step before it produces ({made}): "
                       "prepare that shard or take it out of the blend")
            issues.append(step.issue(path, message) if path else SpecIssue(f"step {step.name}", None, "", message))
    return issues
