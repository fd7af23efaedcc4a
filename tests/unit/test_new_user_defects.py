"""Smaller defects found trying mlrecipe as a new user would (issue 29, point 9)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.spec.load import load_pipeline
from tests.repo import BIN, cli_env

STEP = "  - name: {name}\n    chart: data-prep/data-process\n    recipe: {{process: {{command: [{cmd}]}}}}\n{extra}"


def _pipeline(tmp_path: Path, steps: list[tuple[str, str, str]]) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text("release: r\nsteps:\n" + "".join(STEP.format(name=n, cmd=c, extra=e) for n, c, e in steps))
    return path


def test_empty_depends_on_means_depends_on_nothing(tmp_path: Path) -> None:
    spec = load_pipeline(_pipeline(tmp_path, [("a", "x", "    depends_on: []\n"), ("b", "y", "    depends_on: []\n")]))
    assert spec.dependencies() == {"a": frozenset(), "b": frozenset()}
    spec = load_pipeline(_pipeline(tmp_path, [("a", "x", ""), ("b", "y", "")]))
    assert spec.dependencies() == {"a": frozenset(), "b": frozenset({"a"})}, "without depends_on: file order"


@pytest.mark.integration
def test_independent_steps_run_at_the_same_time(tmp_path: Path, mlhome: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    # a rendezvous: each step marks its start, then waits for the other's mark (the deadline only bounds the
    # wait: steps run one after the other never meet, and the first one fails)
    for n, other in ("ab", "ba"):
        (tmp_path / f"{n}.sh").write_text(
            f"touch {marks}/{n}.start\n"
            f"i=0; while [ ! -e {marks}/{other}.start ]; do i=$((i+1)); [ $i -gt 1200 ] && exit 1; sleep 0.05; done\n"
            f"touch {marks}/{n}.met\n")
    pipeline = _pipeline(tmp_path, [(n, f"sh, {tmp_path}/{n}.sh", "    depends_on: []\n") for n in "ab"])
    done = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline)], env=cli_env(mlhome), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"steps ran one after another: {done.stdout + done.stderr}"
    assert sorted(p.name for p in marks.iterdir()) == ["a.met", "a.start", "b.met", "b.start"]


def test_a_self_dependency_and_a_cycle_elsewhere_are_reported_together(tmp_path: Path, mlhome: Path) -> None:
    pipeline = _pipeline(tmp_path, [("a", "x", "    depends_on: [a]\n"), ("b", "y", "    depends_on: [c]\n"),
                                    ("c", "y", "    depends_on: [b]\n")])
    result = CliRunner().invoke(app, ["validate", str(pipeline)])
    assert result.exit_code == 2, result.output
    assert f"{pipeline}:6: steps[0].depends_on[0]: a step cannot depend on itself" in result.output
    assert f"{pipeline}:10: steps[1].depends_on: dependency cycle among steps: b -> c" in result.output


@pytest.mark.parametrize(
    "resources,extra",
    [("{nnodes: 4, nproc_per_node: 32}", []), ("{nnodes: 5, nproc_per_node: 2}", []),
     ("{nnodes: 3, nproc_per_node: 2}", ["--backend-opt", "max_ranks=5"])],
)
def test_the_rank_cap_hint_names_a_change_that_passes(tmp_path: Path, mlhome: Path, resources: str,
                                                      extra: list[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"resources: {resources}\ntrain:\n  command: [python3]\n")
    argv = ["template", "rel", "training/pytorchjob-distributed", "-f", str(recipe), "--backend-opt", "max_ranks=8",
            *extra]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    hint = result.output.split("(e.g. ", 1)[1].split(")", 1)[0]
    sets = hint.replace("--set ", "").split()
    assert sets, result.output
    fixed = CliRunner().invoke(app, argv + [arg for s in sets for arg in ("--set", s)])
    assert fixed.exit_code == 0, f"hint {hint!r} does not pass:\n{fixed.output}"


TRTLLM_SERVER_PY = """\
image: nvcr.io/nvidia/tritonserver:24.08-py3
pre_script:
  - python3 tools/fill_template.py -i repo/tensorrt_llm/config.pbtxt triton_backend:tensorrtllm,triton_max_batch_size:64
server:
  command: [python3]
  args: [server.py, --model_repo=/fsx/repo]
"""


@pytest.mark.parametrize(
    "recipe,backend",
    [(None, "vLLM"), (TRTLLM_SERVER_PY, "TensorRT-LLM")],
    ids=["vllm-example", "trtllm-fill-template-server-py"],
)
def test_triton_backends_the_host_lacks_are_not_supported_on_local(tmp_path: Path, mlhome: Path, recipe: str | None,
                                                                    backend: str) -> None:
    from tests.repo import EXAMPLES

    path = EXAMPLES / "eks" / "serving" / "triton-vllm.yaml"
    if recipe is not None:
        path = tmp_path / "r.yaml"
        path.write_text(recipe)
    result = CliRunner().invoke(app, ["install", "t", "serving/triton-inference-server", "-f", str(path),
                                      "--dry-run"])
    assert result.exit_code == 2, result.output
    assert f"needs Triton's {backend} backend" in result.output
    assert "not supported on backend local" in result.output and "cannot run" not in result.output


def test_template_names_the_recipe_by_the_path_given(tmp_path: Path, mlhome: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r.yaml").write_text("train:\n  command: [python3]\n  env:\n    - {name: A, value: '{{ .Release'}\n")
    monkeypatch.chdir(tmp_path)
    for argv in (["validate", "r.yaml", "--chart", "training/pytorchjob-distributed"],
                 ["template", "rel", "training/pytorchjob-distributed", "-f", "r.yaml"],
                 ["install", "rel", "training/pytorchjob-distributed", "-f", "r.yaml", "--dry-run"]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert "error: r.yaml:4: train.env[0].value: malformed Helm expression" in result.output, result.output
        assert str(tmp_path) not in result.output
