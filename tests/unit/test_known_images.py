"""Images the project knows run in the environments ``make`` creates; a missing package stops a step first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlrecipe.backends.host import images
from tests.repo import BIN, EXAMPLES, cli_env


def test_vllm_and_ray_images_map_to_the_serving_environment(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".venv-vllm" / "bin").mkdir(parents=True)
    (tmp_path / ".venv-vllm" / "bin" / "python").touch()
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    monkeypatch.delenv(images.IMAGES_VAR, raising=False)
    known = images.ImageEnvironments({}, known=images.known_images())
    for image in ("vllm/vllm-openai:latest", "rayproject/ray:2.52.1-py311-gpu"):
        env, note = known.resolve(image)
        assert env.prefix == tmp_path / ".venv-vllm" and note and ".venv-vllm" in note
    assert known.resolve("nvcr.io/nvidia/pytorch:24.10-py3")[0].prefix is None
    configured = images.ImageEnvironments({"vllm/vllm-openai:latest": "/opt/mine"}, known=images.known_images())
    assert configured.resolve("vllm/vllm-openai:latest")[0].prefix == Path("/opt/mine"), "configuration wins"


def test_no_serving_environment_means_no_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    assert images.known_images() == {}


@pytest.mark.integration
def test_a_missing_package_is_named_with_the_command_that_installs_it() -> None:
    env = images.PythonEnvironment(None)
    problems = images.environment_problems(env, ("json", "no_such_package_xyz"), "chart serving/rayserve")
    assert len(problems) == 1
    assert "needs the Python package 'no_such_package_xyz'" in problems[0]
    assert "install no_such_package_xyz'" in problems[0]
    assert "make " not in problems[0], "no environment of the project installs it"


@pytest.mark.integration
def test_a_rayserve_step_in_an_environment_without_ray_fails_before_it_starts(mlhome: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare-venv"  # an environment without ray (the project's own has it for Ray Train)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    assert images.missing_packages(bare / "bin" / "python", ("ray",)) == ["ray"]
    env = {**cli_env(mlhome), images.IMAGES_VAR: f"rayproject/ray:2.52.1-py311-gpu={bare}"}
    done = subprocess.run([str(BIN / "mlrecipe"), "install", "llm", "serving/rayserve", "-f",
                           str(EXAMPLES / "eks" / "serving" / "rayserve-vllm.yaml"), "-B", "gpus=cpu"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert "needs the Python package 'ray'" in done.stdout
    assert not list(mlhome.glob("releases/local/default/llm/steps/*/node-0.log")), "nothing started"


def test_nemo_and_triton_images_map_to_their_environments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (".venv-vllm", ".venv-triton", ".venv-nemo2"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "python").touch()
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    monkeypatch.delenv(images.IMAGES_VAR, raising=False)
    known = images.ImageEnvironments({}, known=images.known_images())
    for image, env_name in (("nvcr.io/nvidia/nemo:25.02", ".venv-nemo2"),
                            ("nvcr.io/nvidia/tritonserver:24.08-py3", ".venv-triton"),
                            ("rayproject/ray:2.52.1-py311-gpu", ".venv-vllm")):
        assert known.resolve(image)[0].prefix == tmp_path / env_name, image
    assert known.resolve("nvcr.io/nvidia/nemo-curator:25.02")[0].prefix is None, "only NeMo's training image"


@pytest.mark.integration
@pytest.mark.parametrize("framework, package, target", [
    ("nemo2", "nemo", "make nemo2-env"), ("pytorch_lightning", "lightning", "make venv"),
    ("accelerate", "peft", "make venv"), ("megatron", "tokenizers", "make venv"),
])
def test_a_framework_step_names_the_package_its_scripts_import(tmp_path: Path, framework: str, package: str,
                                                              target: str) -> None:
    from mlrecipe.backends.host import framework_needs
    from mlrecipe.spec.load import load_step_release

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"image: nvcr.io/nvidia/pytorch:24.10-py3\nframework: {framework}\n"
                      "train:\n  command: [python, fine_tune.py]\n", encoding="utf-8")
    step = load_step_release("rel", "training/pytorchjob-distributed", [str(recipe)]).steps[0]
    assert package in framework_needs.needs(step)
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    problems = images.environment_problems(images.PythonEnvironment(bare), framework_needs.needs(step),
                                           "chart training/pytorchjob-distributed")
    assert any(f"needs the Python package '{package}'" in p and target in p for p in problems), problems


def test_a_step_without_framework_needs_nothing_more(tmp_path: Path) -> None:
    from mlrecipe.backends.host import framework_needs
    from mlrecipe.spec.load import load_step_release

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("image: python:3.11\ntrain:\n  command: [python, -c, pass]\n", encoding="utf-8")
    step = load_step_release("rel", "training/pytorchjob-distributed", [str(recipe)]).steps[0]
    assert framework_needs.needs(step) == ()
