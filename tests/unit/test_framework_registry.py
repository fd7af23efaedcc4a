"""One framework registry (mlrecipe.spec.frameworks): the scripts layout, the Makefile's environments, the host
check's hints, doctor's packages and the pipeline checks all agree with it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mlrecipe.backends.host import images
from mlrecipe.errors import SpecIssue
from mlrecipe.infra.doctor.local import install_hint
from mlrecipe.infra.doctor.requirements import requirements_of_recipe
from mlrecipe.spec import frameworks
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.load import ReleaseSpec, load_pipeline
from mlrecipe_scripts.layout import TREES

REPO = Path(__file__).resolve().parents[2]


def test_the_scripts_layout_ships_exactly_the_registry_trees() -> None:
    # mlrecipe_scripts cannot import mlrecipe: its layout is checked here against the registry, both ways.
    layout = {(t.chart, frameworks.lookup(t.framework), (*t.packages, *t.flat)) for t in TREES}
    assert all(entry is not None for _, entry, _ in layout), "every tree's folder names a registered framework"
    registry = {(tree.chart, f, tree.subpackages) for f in frameworks.FRAMEWORKS.values() for tree in f.trees}
    assert layout == registry


def test_every_environment_is_one_the_makefile_builds() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for env in frameworks.ENVIRONMENTS:
        assert re.search(rf"^{re.escape(env.make_target)}:", makefile, re.MULTILINE), env.make_target
        assert re.search(rf"^\w+ \?= {re.escape(env.folder)}$", makefile, re.MULTILINE), env.folder
    for package in frameworks.PACKAGES.values():
        assert package.home is None or package.module in package.home.installs, package


@pytest.mark.parametrize(("framework", "packages"), [
    ("megatron", ["numpy", "tokenizers", "zstandard"]),
    ("nemo2", ["nemo", "nemo_run"]),
    ("pytorch_lightning", ["torch", "lightning", "transformers"]),
    ("ray_train", ["ray", "transformers"]),
    ("encoder_transformers", ["transformers"]),
    ("vllm-0.19.0", ["vllm"]),
    ("Horovod", ["mpi4py"]),
])
def test_doctor_checks_the_packages_of_every_framework_the_recipe_names(framework: str, packages: list[str]) -> None:
    assert requirements_of_recipe({"framework": framework}).packages == packages


@pytest.mark.parametrize(("module", "target"), [
    ("tokenizers", "make venv"), ("zstandard", "make venv"), ("nemo", "make nemo2-env"),
    ("pytriton", "make triton-env"), ("vllm", "make serve-env"),
])
def test_a_missing_package_is_sent_to_the_make_target_that_installs_it(monkeypatch: pytest.MonkeyPatch, module: str,
                                                                      target: str) -> None:
    monkeypatch.setattr(images, "missing_packages", lambda python, modules: list(modules))
    (problem,) = images.environment_problems(images.PythonEnvironment(Path("/opt/elsewhere")), (module,), "chart c")
    assert f"'{module}'" in problem and f"run '{target}'" in problem, problem
    assert install_hint(module, Path("/opt/elsewhere/bin/python")).startswith(target + " "), module


def test_the_hint_names_the_environment_being_checked_when_its_target_installs_the_package(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "missing_packages", lambda python, modules: list(modules))
    (in_cli,) = images.environment_problems(images.PythonEnvironment(None), ("ray",), "chart training/raytrain")
    (in_serving,) = images.environment_problems(images.PythonEnvironment(Path("/x/.venv-vllm")), ("ray",), "c")
    assert "run 'make venv'" in in_cli and "run 'make serve-env'" in in_serving


def test_a_package_no_target_installs_gets_pip_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "missing_packages", lambda python, modules: list(modules))
    (problem,) = images.environment_problems(images.PythonEnvironment(None), ("no_such_package_xyz",), "c")
    assert "make " not in problem and "install no_such_package_xyz'" in problem
    assert install_hint("jax", Path("/opt/elsewhere/bin/python")) == "/opt/elsewhere/bin/python -m pip install 'jax'"


def test_the_megatron_entry_registers_the_blend_check() -> None:
    from mlrecipe.spec.megatron_blend import blend_issues

    assert frameworks.FRAMEWORKS["megatron"].pipeline_checks == (blend_issues,)


def test_load_pipeline_runs_the_checks_the_registry_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def check(spec: ReleaseSpec) -> list[SpecIssue]:
        seen.append(spec.release)
        return [SpecIssue(spec.source, 1, "steps", "planted framework check")]

    planted = frameworks.Framework("planted", (), pipeline_checks=(check,))
    monkeypatch.setitem(frameworks.FRAMEWORKS, "planted", planted)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: rel\nsteps:\n  - name: a\n    chart: training/pytorchjob-distributed\n"
                        "    values:\n      train:\n        command: [python, -c, pass]\n", encoding="utf-8")
    with pytest.raises(SpecError) as raised:
        load_pipeline(pipeline)
    assert seen == ["rel"] and [i.message for i in raised.value.issues] == ["planted framework check"]


def test_doctor_checks_an_image_in_the_environment_the_local_backend_runs_it_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from mlrecipe.infra.doctor import local

    nemo = tmp_path / ".venv-nemo2" / "bin" / "python"
    nemo.parent.mkdir(parents=True)
    nemo.touch()
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    monkeypatch.setattr(local, "_local_options", lambda: SimpleNamespace(images={}))
    monkeypatch.delenv(images.IMAGES_VAR, raising=False)
    image = "nvcr.io/nvidia/nemo:25.02"
    backend = images.ImageEnvironments({}, known=images.known_images()).resolve(image)[0]
    assert backend.prefix is not None and local.interpreter_for([image]) == backend.bin_dir / "python" == nemo
    assert local.interpreter_for(["vllm/vllm-openai:latest"]) == Path(sys.executable), "no .venv-vllm here"


@pytest.mark.parametrize(("framework", "host"), [
    ("megatron", ("numpy", "tokenizers", "zstandard")), ("nemo2", ("nemo", "nemo_run")),
    ("vllm-0.19.0", ()),  # rayserve's default: a serve config may name an app of its own (the chart checks ray)
    ("pytorch", ()),  # no scripts of the project: nothing to check before the step starts
])
def test_host_backends_check_what_the_framework_scripts_import(tmp_path: Path, framework: str,
                                                               host: tuple[str, ...]) -> None:
    from mlrecipe.backends.host import framework_needs
    from mlrecipe.spec.load import load_step_release

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"framework: {framework}\ntrain:\n  command: [python, -c, pass]\n", encoding="utf-8")
    step = load_step_release("rel", "training/pytorchjob-distributed", [str(recipe)]).steps[0]
    assert framework_needs.needs(step) == host
