"""Strings whose Helm actions only name fields (``/fsx/{{ .Release.Name }}/data``) are taken as valid template syntax
without loading Helm's library; every string the fast path takes must be one Go's template parser accepts."""

from __future__ import annotations

from helm_python import HelmError
from hypothesis import given, settings
from hypothesis import strategies as st

from mlrecipe.helm import tpl

PIECES = st.sampled_from(["{{", "}}", "{{-", "-}}", " ", "  ", "-", ".", ".Release", ".Name", ".Values", ".a_1", "x",
                          "|", "quote", "$", "/", "(", ")", "\n", "\t", "{", "}", "0", "_", ".9"])
STRINGS = st.lists(PIECES, min_size=1, max_size=10).map("".join)
FIELDS = st.lists(st.sampled_from([".Release", ".Name", ".Values", ".a_1", ".Z9", "._x"]), min_size=1, max_size=3)
ACTIONS = st.tuples(st.sampled_from(["{{", "{{ ", "{{- ", "{{-  ", "{{-", "{{\t"]), FIELDS,
                    st.sampled_from(["}}", " }}", " -}}", "-}}", "\t-}}", " - }}"])).map(
    lambda a: a[0] + "".join(a[1]) + a[2])
TEMPLATES = st.lists(st.one_of(ACTIONS, st.sampled_from(["/fsx/", "-", "x", " ", "}", "{"])), min_size=1,
                     max_size=5).map("".join)


def helm_accepts(text: str) -> bool:
    try:
        tpl._render([tpl._PARSE_ONLY % text], {}, "r", "n")
    except HelmError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.one_of(STRINGS, TEMPLATES))
def test_what_the_fast_path_takes_helm_parses(text: str) -> None:
    if "{{" in text and text.rfind("{{") <= text.rfind("}}") and tpl._plain_fields_only(text):
        assert helm_accepts(text), text


def test_common_values_take_the_fast_path_and_others_reach_helm() -> None:
    for text in ("{{ .Release.Name }}", "/fsx/{{ .Release.Name }}/data", "{{- .Values.resources.nnodes -}}",
                 "{{.Release.Namespace}}-{{ .Release.Name }}"):
        assert tpl._plain_fields_only(text), text
    for text in ("{{ .Release.Name | quote }}", "{{ mul 2 3 }}", "{{-.X}}", "{{ . }}", "{{ .X. }}", "{{ $x }}"):
        assert not tpl._plain_fields_only(text), text
    assert tpl.syntax_errors(["{{ .Release.Name", "{{ nofunc 1 }}", "{{ .Release.Name }}"]) == [
        (0, "malformed Helm expression: '{{' without a closing '}}'"),
        (1, tpl.syntax_errors(["{{ nofunc 1 }}"])[0][1])]
