"""Plain ``--set``/``-B`` expressions (``key.sub=value``) are parsed without loading Helm's library; every one the
fast path takes must give exactly what Helm's parser gives: values, types and key order."""

from __future__ import annotations

import contextlib
import json

import pytest
from helm_python import parse_set_string
from hypothesis import given, settings
from hypothesis import strategies as st

from mlrecipe.errors import SpecError
from mlrecipe.spec import values as values_module
from mlrecipe.spec.values import parse_sets, set_roots

KEYS = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=4)
VALUES = st.one_of(
    st.sampled_from(["true", "TRUE", "False", "null", "NULL", "0", "-0", "+5", "007", "-07", "1.5", "1e3", "x=y",
                     " ", "a b", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                     "-9223372036854775809", "ml.p4d.24xlarge", "s3://b/k", "%", "'q'", '"q"', "#", "~"]),
    st.integers(min_value=-(2**64), max_value=2**64).map(str),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e), min_size=1, max_size=8),
)
EXPRESSIONS = st.lists(st.tuples(st.lists(KEYS, min_size=1, max_size=3), VALUES).map(
    lambda kv: f"{'.'.join(kv[0])}={kv[1]}"), min_size=1, max_size=5)


def helm(expressions: list[str]) -> object:
    return parse_set_string(",".join(expressions))


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS)
def test_the_fast_path_gives_what_helm_gives(expressions: list[str]) -> None:
    plain = values_module._plain_sets(expressions)
    if plain is None:
        return
    assert json.dumps(plain) == json.dumps(helm(expressions))  # the same values, types and key order


@pytest.mark.parametrize("expressions", [
    ["mode=local", "poll_seconds=0.2"], ["resources.nnodes=2", "resources.nproc_per_node=8", "image=x:1"],
    ["a=TRUE", "b=null", "c=-07", "d=007", "e=9223372036854775808", "f=x=y"], ["a.b=1", "a.b=2"],
])
def test_common_expressions_take_the_fast_path(expressions: list[str]) -> None:
    plain = values_module._plain_sets(expressions)
    assert plain is not None
    assert json.dumps(plain) == json.dumps(helm(expressions))
    assert set_roots(expressions) == {k: [e for e in expressions if e.split("=")[0].split(".")[0] == k]
                                      for k in plain}


@pytest.mark.parametrize("expressions", [
    ["env[0].name=A"], ["a=x\\,y"], ["args={a,b}"], ["a=1,b=2"], ["a="], ["a=fal\u017fe"], ["a=1", "a.b=2"],
    ["a.b=2", "a=1"], ["=1"], ["a..b=1"],
])
def test_anything_else_goes_to_helm(expressions: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert values_module._plain_sets(expressions) is None
    calls: list[str] = []
    monkeypatch.setattr("helm_python.parse_set_string", lambda s: calls.append(s) or parse_set_string(s))
    with contextlib.suppress(SpecError):  # refused ones are test_set_expressions.py's; here: Helm was asked
        parse_sets(expressions)
    assert calls
