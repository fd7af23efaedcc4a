"""YAML loading that keeps the line of every field, for error messages.

Hostile documents are refused before any Python data is built: a file above :data:`MAX_BYTES`,
nesting deeper than :data:`MAX_DEPTH` and documents whose aliases expand to more than
:data:`MAX_NODES` nodes (a "billion laughs" document is 3 KB of text and billions of nodes once
expanded). The document is composed once into a node graph (aliases share nodes, so composing is
cheap), measured with memoised subtree sizes, and only then constructed from that same graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlrecipe.spec.errors import SpecError, SpecIssue

Loc = tuple[str | int, ...]

#: Largest YAML file accepted, in bytes. Recipes and pipelines are a few KB; PyYAML's pure-Python parser
#: reads about 0.25-1 MB/s, so this also bounds the time spent before the other limits can be checked.
MAX_BYTES = 1024 * 1024
#: Deepest nesting of mappings and sequences accepted, aliases expanded.
MAX_DEPTH = 200
#: Most nodes (scalars, sequences, mappings, mapping keys) a document may have, aliases expanded.
MAX_NODES = 1_000_000


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


class _Refused(Exception):
    """A document over one of the limits; ``line`` is 1-based or None."""

    def __init__(self, message: str, line: int | None, loc: Loc = ()) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.loc = loc


class _Checks(yaml.composer.Composer, yaml.constructor.SafeConstructor):
    """The safe loader's composer and constructor, refusing nesting deeper than :data:`MAX_DEPTH` while it composes
    (the composer recurses once per level, so a deep document would otherwise end in a RecursionError).

    Values become what Helm reads from the same text: a timestamp stays its text (Helm's YAML reader keeps it
    a string), ``!!binary`` and ``!!set`` are refused (no JSON value carries them), and a scalar its tag cannot
    read (``!!int x``, ``!!bool maybe``, an integer of more than 4,300 digits) is refused at its line and field.
    """

    _depth = 0
    node_locs: dict[int, Loc]

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (_Refused, yaml.YAMLError):
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
            shown = node.value if isinstance(node, yaml.ScalarNode) else type(node).__name__
            shown = shown if len(shown) <= 40 else f"{shown[:37]}..."
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            detail = "an integer of more than 4,300 digits" if "4300" in str(exc) else f"{tag} {shown!r}"
            raise _Refused(f"cannot read {detail}", node.start_mark.line + 1,
                           self.node_locs.get(id(node), ())) from None

    def _timestamp_text(self, node: yaml.ScalarNode) -> str:
        self.construct_yaml_timestamp(node)  # raises on a malformed explicit !!timestamp
        return str(node.value)

    def _unsupported(self, node: yaml.Node) -> Any:
        raise _Refused(f"{node.tag.replace('tag:yaml.org,2002:', '!!')} values are not supported: values are "
                       "text, numbers, booleans, lists and mappings", node.start_mark.line + 1,
                       self.node_locs.get(id(node), ()))

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[attr-defined]  # the parser's (Python or libyaml)
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_Checks.add_constructor("tag:yaml.org,2002:timestamp", _Checks._timestamp_text)  # type: ignore[type-var]
_Checks.add_constructor("tag:yaml.org,2002:binary", _Checks._unsupported)  # type: ignore[type-var]
_Checks.add_constructor("tag:yaml.org,2002:set", _Checks._unsupported)  # type: ignore[type-var]


class _Loader(_Checks, yaml.SafeLoader):
    """PyYAML's pure-Python reader, scanner and parser under :class:`_Checks`: its messages name the problem
    and its line."""

    def __init__(self, stream: str) -> None:
        yaml.SafeLoader.__init__(self, stream)
        self.node_locs = {}


_CParser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None)  # None: a PyYAML built without libyaml
#: Texts only the pure-Python parser reads: with a character its reader refuses (its message names it), or a tab, a
#: ``?`` or a byte-order mark, with which libyaml accepts what PyYAML refuses (``:#<tab>x`` as a key, ``{cpu? 1}``, a
#: mark starting a line), found by comparing the two on mutated recipes (``tests/unit/test_yaml_fast_parser.py``).
_PURE_PYTHON_ONLY = (yaml.reader.Reader.NON_PRINTABLE, re.compile("[\t?\ufeff]"))  # PyYAML's own, compiled once


if _CParser is not None:
    class _FastLoader(_Checks, _CParser, yaml.resolver.Resolver):  # type: ignore[misc]
        """libyaml's scanner and parser (about 10 times faster) under the same Python composer and constructor:
        the same nodes, lines and values. A document it refuses is read again by :class:`_Loader`, whose message
        says why."""

        get_single_node = yaml.composer.Composer.get_single_node  # the Python composer's, not libyaml's

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self.node_locs = {}


def _measure(root: yaml.Node) -> None:
    """Refuse a node graph whose expansion has more than :data:`MAX_NODES` nodes, nests deeper than
    :data:`MAX_DEPTH` or contains itself. Sizes and heights are memoised per node, so a shared
    (aliased) node is measured once however often it is used."""
    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)
    active: set[int] = set()
    too_deep = f"nesting deeper than {MAX_DEPTH} levels once aliases are expanded"

    def visit(node: yaml.Node, loc: Loc, depth: int) -> tuple[int, int]:
        key = id(node)
        known = memo.get(key)
        if known is None and key in active:
            raise _Refused("recursive alias: the node contains itself", node.start_mark.line + 1, loc)
        if depth + (known[1] if known else 0) > MAX_DEPTH:
            raise _Refused(too_deep, node.start_mark.line + 1, loc)
        if known is not None:
            return known
        children: list[tuple[yaml.Node, Loc]] = []
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                children += [(key_node, loc), (value_node, (*loc, name))]
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, (*loc, index)) for index, item in enumerate(node.value)]
        active.add(key)
        size, height = 1, 0
        for child, child_loc in children:
            child_size, child_height = visit(child, child_loc, depth + 1)
            size += child_size
            height = max(height, child_height + 1)
            if size > MAX_NODES:
                raise _Refused(f"aliases expand to more than {MAX_NODES:,} nodes (a 'billion laughs' document?)",
                               node.start_mark.line + 1, loc)
        active.discard(key)
        memo[key] = (size, height)
        return size, height

    visit(root, (), 1)


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], issues: list[SpecIssue], file: str,
          node_locs: dict[int, Loc]) -> None:
    lines.setdefault(loc, node.start_mark.line + 1)
    node_locs.setdefault(id(node), loc)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a sequence or mapping as a key: construction reports it
            key = key_node.value
            if key in seen:
                issues.append(SpecIssue(file, key_node.start_mark.line + 1, _fmt((*loc, key)), "duplicate key"))
            seen.add(key)
            lines[(*loc, key)] = key_node.start_mark.line + 1
            node_locs.setdefault(id(key_node), (*loc, key))
            _walk(value_node, (*loc, key), lines, issues, file, node_locs)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*loc, index)] = item.start_mark.line + 1
            _walk(item, (*loc, index), lines, issues, file, node_locs)


def _fmt(loc: Loc) -> str:
    from mlrecipe.spec.errors import format_path

    return format_path(loc)


def _too_big(file: str, size: int | None) -> SpecError:
    amount = f"{size:,} bytes" if size is not None else f"more than {MAX_BYTES:,} bytes"
    return SpecError.single(file, f"YAML document refused: file too large ({amount}; the limit is {MAX_BYTES:,})")


def _line_column(text: str | bytes, position: int) -> tuple[int, int]:
    """The 1-based line and column of the character (or byte) at ``position`` of ``text``."""
    newline = "\n" if isinstance(text, str) else b"\n"
    line_start = text.rfind(newline, 0, position) + 1  # type: ignore[arg-type]
    return text.count(newline, 0, position) + 1, position - line_start + 1  # type: ignore[arg-type]


def parse_yaml(text: str, file: str) -> YamlDoc:
    """Parse ``text``; a syntax error, a duplicate key or a document over the limits (size, depth,
    nodes once aliases are expanded) raises :class:`SpecError` naming the line.

    libyaml scans and parses when PyYAML has it (:class:`_FastLoader`); a text with a character PyYAML's reader
    refuses, or one libyaml refuses, is read by the pure-Python parser (:class:`_Loader`), whose messages are the
    ones users see.
    """
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise _too_big(file, None)
    if _CParser is not None and not any(pattern.search(text) for pattern in _PURE_PYTHON_ONLY):
        try:
            return _read(_FastLoader(text), file)
        except _Refused as exc:
            raise _refusal(file, exc) from None
        except (SpecError, RecursionError, MemoryError):
            raise
        except Exception:  # libyaml refused it: the pure-Python parser says why, as it always has
            pass
    try:
        return _read(_Loader(text), file)  # may raise: the reader refuses non-printable characters
    except _Refused as exc:
        raise _refusal(file, exc) from None
    except yaml.reader.ReaderError as exc:
        at_line, column = _line_column(text, exc.position)
        char = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        raise SpecError.single(file, f"YAML syntax error: column {column}: character {char} (a control character) "
                               "is not allowed", at_line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError.single(file, f"YAML syntax error: {problem}", line) from None


def _read(loader: _Checks, file: str) -> YamlDoc:
    """Compose, check and construct the document ``loader`` reads; a duplicate key raises :class:`SpecError`, a
    document over the limits :class:`_Refused`, a syntax error PyYAML's own."""
    try:
        node = loader.get_single_node()
        if node is not None:
            _measure(node)
        issues: list[SpecIssue] = []
        lines: dict[Loc, int] = {}
        if node is not None:
            _walk(node, (), lines, issues, file, loader.node_locs)
        if issues:
            raise SpecError(issues)
        # Built from the same node graph (after the walk: merge keys are flattened in place).
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()  # type: ignore[attr-defined]  # the parser's
    return YamlDoc(file, data, lines)


def _refusal(file: str, exc: _Refused) -> SpecError:
    return SpecError.single(file, f"YAML document refused: {exc.message}", exc.line, _fmt(exc.loc))


def load_yaml(path: str | Path, shown: str | None = None) -> YamlDoc:
    """Read and parse a YAML file; a missing, unreadable or too large file raises :class:`SpecError`. Messages
    (and the document's ``file``) name it ``shown``, the path as the user gave it, when given, else ``path``."""
    p = Path(path)
    name = str(path) if shown is None else shown
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)  # never more than the limit (a FIFO or /dev/zero ends too)
        if len(raw) > MAX_BYTES:
            raise _too_big(name, p.stat().st_size if p.is_file() else None)
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_column(raw, exc.start)
        raise SpecError.single(name, f"not UTF-8 text: column {column}: byte 0x{raw[exc.start]:02x} cannot "
                               "be decoded (save the file as UTF-8)", line) from None
    except FileNotFoundError:
        raise SpecError.single(name, "file not found") from None
    except IsADirectoryError:
        raise SpecError.single(name, "is a directory, expected a YAML file") from None
    except OSError as exc:
        raise SpecError.single(name, f"cannot read: {exc}") from None
    return parse_yaml(text, name)
