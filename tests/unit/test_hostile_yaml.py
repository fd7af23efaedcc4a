"""Hostile YAML (alias bombs, deep nesting, huge files) is refused fast, with exit 2 and a message naming
the file and line; ordinary anchors and aliases in a recipe still work."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlrecipe.spec import yamlfile
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.yamlfile import MAX_BYTES, MAX_DEPTH, MAX_NODES, load_yaml, parse_yaml
from tests.repo import BIN, cli_env

CHART = "training/pytorchjob-distributed"
WAIT_LIMIT = 60  # seconds: bounds the wait for a CLI run, never asserts its speed


def _billion_laughs() -> str:
    """9 levels of 9 aliases each: a few hundred bytes of text, 9**9 strings once expanded."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def _validate(path: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``mlrecipe validate``; the timeout only bounds the wait (the refusal message shows that the loader stopped
    before expanding: the speed itself is ``benchmarks/``' business, not a test's)."""
    return subprocess.run([str(BIN / "mlrecipe"), "validate", str(path), *args], capture_output=True,
                          text=True, env=cli_env(home), timeout=WAIT_LIMIT, check=False)


@pytest.mark.integration
def test_billion_laughs_refused_fast_by_the_cli(tmp_path: Path) -> None:
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(_billion_laughs())
    result = _validate(bomb, tmp_path / "home")
    assert result.returncode == 2, result.stderr
    assert f"{bomb}:7: a6: YAML document refused: aliases expand to more than {MAX_NODES:,} nodes" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_alias_bomb_inside_a_pipeline_recipe_is_refused(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    body = "".join(f"  {line}\n" for line in _billion_laughs().splitlines())
    recipe.write_text("train:\n  command: [python3]\nkueue:\n" + body)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(f"release: r\nsteps:\n  - name: a\n    chart: {CHART}\n    recipe: recipe.yaml\n")
    result = _validate(pipeline, tmp_path / "home")
    assert result.returncode == 2
    assert f"{recipe}:10: kueue.a6: YAML document refused: aliases expand" in result.stderr


@pytest.mark.integration
def test_deep_nesting_refused_fast_by_the_cli(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("train:\n  args: " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = _validate(deep, tmp_path / "home", "-c", CHART)
    assert result.returncode == 2, result.stderr
    assert f"{deep}:2: YAML document refused: nesting deeper than {MAX_DEPTH} levels" in result.stderr
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr


def test_deep_block_nesting_names_the_line() -> None:
    text = "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 50))
    with pytest.raises(SpecError) as info:
        parse_yaml(text, "deep.yaml")
    (issue,) = info.value.issues
    assert (issue.file, issue.line) == ("deep.yaml", MAX_DEPTH)
    assert f"nesting deeper than {MAX_DEPTH} levels" in issue.message


def test_deep_nesting_through_aliases_is_refused() -> None:
    """Each anchor adds one level to the one before: shallow as written, deep once expanded."""
    lines = ["a0: &a0 " + "[" * 100 + "]" * 100]
    lines += [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 3 * MAX_DEPTH)]
    with pytest.raises(SpecError) as info:
        parse_yaml("\n".join(lines), "chain.yaml")
    assert "levels once aliases are expanded" in str(info.value)


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        parse_yaml("train:\n  args: &loop [x, *loop]\n", "loop.yaml")
    assert str(info.value) == ("loop.yaml:2: train.args[1]: YAML document refused: "
                               "recursive alias: the node contains itself")


@pytest.mark.integration
def test_huge_file_refused_fast_by_the_cli(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    line = "# " + "x" * 98 + "\n"
    huge.write_text("train:\n  command: [python3]\n" + line * (MAX_BYTES // len(line) + 10))
    result = _validate(huge, tmp_path / "home", "-c", CHART)
    assert result.returncode == 2, result.stderr
    size = huge.stat().st_size
    assert f"{huge}: YAML document refused: file too large ({size:,} bytes; the limit is {MAX_BYTES:,})" \
        in result.stderr


def test_huge_text_refused_without_parsing() -> None:
    with pytest.raises(SpecError, match="file too large"):
        parse_yaml("a: " + "é" * (MAX_BYTES // 2 + 1), "big.yaml")  # fewer characters than bytes


def test_load_reads_no_more_than_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlfile, "MAX_BYTES", 64)
    path = tmp_path / "r.yaml"
    path.write_text("a: " + "b" * 100 + "\n")
    with pytest.raises(SpecError, match=r"file too large \(104 bytes; the limit is 64\)"):
        load_yaml(path)


def test_too_many_nodes_without_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlfile, "MAX_NODES", 1000)
    with pytest.raises(SpecError, match="more than 1,000 nodes"):
        parse_yaml("a: [" + ",".join(["x"] * 1000) + "]\n", "wide.yaml")


@pytest.mark.integration
def test_ordinary_aliases_still_work(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "resources:\n"
        "  nnodes: 2\n"
        "  requests: &res {cpu: '2', memory: 4Gi}\n"
        "  limits:\n"
        "    <<: *res\n"
        "    cpu: '4'\n"
        "train:\n"
        "  command: [python3]\n"
        "  args: [-c, \"'print(1)'\"]\n"
        "  env: &env\n"
        "    - {name: DATA_DIR, value: /fsx/data}\n"
        "    - {name: LOG_LEVEL, value: info}\n"
        "post_script: [*env]\n"
    )
    doc = load_yaml(recipe)
    assert doc.data["resources"]["limits"] == {"cpu": "4", "memory": "4Gi"}
    assert doc.data["post_script"][0][1] == {"name": "LOG_LEVEL", "value": "info"}
    assert doc.line_of(("train", "env")) == 10 and doc.line_of(("resources", "limits", "cpu")) == 6

    recipe.write_text(recipe.read_text().replace("post_script: [*env]\n", ""))
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "release: r\n"
        "steps:\n"
        f"  - name: a\n    chart: {CHART}\n    recipe: recipe.yaml\n"
        f"    values: &values {{resources: {{nnodes: 1}}, env: [{{name: A, value: '1'}}]}}\n"
        f"  - name: b\n    chart: {CHART}\n    recipe: recipe.yaml\n    values: *values\n"
        "    depends_on: a\n"
    )
    result = _validate(pipeline, tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert "valid (2 step(s): a, b)" in result.stdout


def test_duplicate_keys_still_reported_with_their_line() -> None:
    with pytest.raises(SpecError) as info:
        parse_yaml("train:\n  command: [a]\n  command: [b]\n", "dup.yaml")
    assert str(info.value) == "dup.yaml:3: train.command: duplicate key"


@pytest.mark.integration
def test_doctor_and_values_files_use_the_hardened_loader(tmp_path: Path) -> None:
    from mlrecipe.errors import SpecError
    from mlrecipe.helm.render import load_values_file

    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(_billion_laughs())
    with pytest.raises(SpecError):
        load_values_file(bomb)
    result = subprocess.run([str(BIN / "mlrecipe"), "doctor", "-f", str(bomb)], capture_output=True, text=True,
                            env=cli_env(tmp_path / "home"), timeout=WAIT_LIMIT, check=False)
    assert result.returncode == 2 and "YAML document refused" in result.stderr
