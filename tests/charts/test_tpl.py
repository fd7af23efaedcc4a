"""expand_templates evaluates Helm expressions with the real Helm engine."""

from __future__ import annotations

import pytest

from mlrecipe.helm.tpl import TemplateError, expand_templates


def test_expressions_are_evaluated() -> None:
    values = {"resources": {"num_nodes": 2, "procs_per_node": 4}}
    mul = "{{ mul .Values.resources.num_nodes .Values.resources.procs_per_node }}"
    strings = ["/efs/home/{{ .Release.Name }}", "plain $HOME", mul, "{{ .Release.Namespace }}"]
    out = expand_templates(strings, values, "rel", "ns")
    assert out == ["/efs/home/rel", "plain $HOME", "8", "ns"]


def test_plain_strings_do_not_reach_helm(monkeypatch: pytest.MonkeyPatch) -> None:
    import mlrecipe.helm.tpl as tpl

    monkeypatch.setattr(tpl, "_chart", lambda *_: pytest.fail("Helm was called"))
    assert expand_templates(["a", "b {x}"], {}, "r", "n") == ["a", "b {x}"]


def test_bad_expression() -> None:
    with pytest.raises(TemplateError):
        expand_templates(["{{ .Values.nope.deeper }}"], {}, "r", "n")
