"""YAML loading that keeps the line of every field, for error messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlrecipe.spec.errors import SpecError, SpecIssue

Loc = tuple[str | int, ...]


@dataclass
class YamlDoc:
    """A parsed YAML document with the line (1-based) where each field path starts."""

    file: str
    data: Any
    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int | None:
        """The line of ``loc`` or of its nearest ancestor that has one."""
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get((), None)


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], issues: list[SpecIssue], file: str) -> None:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                issues.append(SpecIssue(file, key_node.start_mark.line + 1, _fmt((*loc, key)), "duplicate key"))
            seen.add(key)
            lines[(*loc, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*loc, key), lines, issues, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*loc, index)] = item.start_mark.line + 1
            _walk(item, (*loc, index), lines, issues, file)


def _fmt(loc: Loc) -> str:
    from mlrecipe.spec.errors import format_path

    return format_path(loc)


def parse_yaml(text: str, file: str) -> YamlDoc:
    """Parse ``text``; a syntax error or duplicate key raises :class:`SpecError` naming the line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError.single(file, f"YAML syntax error: {problem}", line) from None
    doc = YamlDoc(file, data)
    issues: list[SpecIssue] = []
    if node is not None:
        _walk(node, (), doc.lines, issues, file)
    if issues:
        raise SpecError(issues)
    return doc


def load_yaml(path: str | Path) -> YamlDoc:
    """Read and parse a YAML file; a missing or unreadable file raises :class:`SpecError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError.single(str(path), "file not found") from None
    except IsADirectoryError:
        raise SpecError.single(str(path), "is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError.single(str(path), f"cannot read: {exc}") from None
    return parse_yaml(text, str(path))
