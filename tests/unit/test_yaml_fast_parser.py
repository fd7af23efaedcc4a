"""libyaml reads the recipes (``spec.yamlfile._FastLoader``: about 10 times PyYAML's pure-Python scanner and parser,
7-8 ms of ``validate`` of the quickstart) under the same Python composer and constructor, and ``parse_yaml`` gives
exactly what the pure-Python parser gave: the same data, the same line of every field, the same refusals and
messages (a text libyaml refuses is read again by the pure-Python parser, whose message is the one shown).

Checked on every YAML file shipped under ``examples/`` and on a bounded, derandomized set of mutations of them
(characters YAML gives a meaning to, inserted, deleted or replaced), each parsed both ways.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlrecipe.spec import yamlfile
from mlrecipe.spec.errors import SpecError
from tests.repo import EXAMPLES

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the dev extra: pip install -e .[dev]")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = pytest.mark.skipif(yamlfile._CParser is None, reason="this PyYAML was built without libyaml")

CORPUS = {str(p.relative_to(EXAMPLES)): p.read_text() for p in sorted(EXAMPLES.rglob("*.yaml"))
          if p.stat().st_size < 64 * 1024}
HOSTILE = [
    "a: 1\na: 2\n",  # duplicate key
    "a: &x [1, *x]\n",  # recursive alias
    "a: !!binary aGk=\n", "a: !!set {x}\n", "a: !!int x\n", "a: 2024-01-01\nb: !!timestamp nope\n",
    "base: &b {x: 1}\nc:\n  <<: *b\n  y: 2\n",  # merge key
    "a:\n\t- x\n", "a: [1, 2\n", "a: 'x\n", "- a\nb: c\n", "a: b: c\n", "{a: 1}}\n", "%YAML 1.1\n---\na: 1\n",
    "a: 1\n---\nb: 2\n", "a: *nope\n", "? [a, b]\n: c\n", "a: 1\x01\n", "a: \ufeffx\n", "a: .nan\nb: -.inf\n",
    "a: " + "[" * 300 + "]" * 300 + "\n", "", "# only a comment\n", "a: |\n  x\n   y\nb: >-\n  z\n",
]
SPECIAL = [*":-[]{}#&*!|>'\"%@`,?. \t\n\r\\", "  ", "\n  ", ": ", "- ", "<<: ", "*a", "&a ", "!!str ", "\r\n", "---",
           "...", "\u2028", "\x85", "\ufeff", "\u00a0", "!x ", "~", "0x1"]


def _outcome(text: str, monkeypatch: pytest.MonkeyPatch, pure: bool) -> Any:
    """What ``parse_yaml`` makes of ``text``: (data, lines) or the message of its refusal."""
    with monkeypatch.context() as patch:
        if pure:
            patch.setattr(yamlfile, "_CParser", None)
        try:
            doc = yamlfile.parse_yaml(text, "recipe.yaml")
        except SpecError as exc:
            return ("refused", str(exc))
    return (repr(doc.data), doc.lines)


def _same_both_ways(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _outcome(text, monkeypatch, pure=False) == _outcome(text, monkeypatch, pure=True), repr(text)


def test_the_shipped_examples_are_read_by_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every one without a tab, ``?`` or byte-order mark (``yamlfile._PURE_PYTHON_ONLY``), the quickstart's all."""
    read_by_libyaml = []
    real = yamlfile._FastLoader

    def spy(text: str) -> Any:
        read_by_libyaml.append(text)
        return real(text)

    monkeypatch.setattr(yamlfile, "_FastLoader", spy)
    plain = {name: text for name, text in CORPUS.items() if not any(c in text for c in "\t?\ufeff")}
    assert len(plain) > 20 and all(name in plain for name in CORPUS if name.startswith("quickstart/"))
    for name, text in CORPUS.items():
        yamlfile.parse_yaml(text, name)
    assert read_by_libyaml == list(plain.values())


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_shipped_examples_read_the_same_both_ways(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_both_ways(CORPUS[name], monkeypatch)


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_and_malformed_documents_read_the_same_both_ways(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_both_ways(text, monkeypatch)


@st.composite
def _mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(sorted(CORPUS.values(), key=len)[:40]))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        change = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.sampled_from(SPECIAL))
        if change == "insert":
            text = text[:at] + piece + text[at:]
        elif change == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 3)):]
        else:
            text = text[:at] + piece + text[at + 1:]
    return text


@settings(max_examples=400, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=_mutated())
def test_mutated_documents_read_the_same_both_ways(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_both_ways(text, monkeypatch)
