"""The docs follow the code: generated reference pages are current, links resolve, the front page stays a front
page, and every snippet marked runnable is checked (YAML validated here; shell run in ``test_docs_shell.py``).

A snippet is marked by an HTML comment on the line before its fence: ``<!-- runnable: pipeline -->``,
``<!-- runnable: recipe CHART -->``, ``<!-- runnable: config -->`` or ``<!-- runnable: shell -->``.
"""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from mlrecipe.cli import reference
from mlrecipe.cli.app import app
from tests.doc_snippets import PAGES, REPO, Snippet, snippets

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_generated_reference_pages_are_current() -> None:
    assert reference.main(["--check"]) == 0, ("run `make docs` and commit docs/reference/ and "
                                              "src/mlrecipe/cli/help_texts.json")


def test_front_page_is_a_front_page() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 20 * 1024
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make demo", "make test"]
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dated measurements belong in docs/performance.md"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: links to missing files {broken}"


def test_every_kind_of_snippet_is_marked_somewhere() -> None:
    for kind in ("pipeline", "recipe", "config", "shell"):
        assert snippets(kind), f"no snippet marked '<!-- runnable: {kind} -->' in the docs"


@pytest.mark.parametrize("snippet", snippets("pipeline") + snippets("recipe"), ids=str)
def test_yaml_snippet_validates(snippet: Snippet, tmp_path: Path, mlhome: Path) -> None:
    path = tmp_path / "snippet.yaml"
    path.write_text(snippet.text, encoding="utf-8")
    args = ["validate", str(path)] + (["--chart", snippet.argument] if snippet.kind == "recipe" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{snippet}: {result.output}"


@pytest.mark.parametrize("snippet", snippets("config"), ids=str)
def test_config_snippet_matches_the_config_schema(snippet: Snippet) -> None:
    from mlrecipe.backends.config_schema import config_schema

    jsonschema.validate(yaml.safe_load(snippet.text), config_schema())
