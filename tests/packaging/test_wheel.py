"""The built wheel works outside the checkout: it holds every chart (library chart and runtime as real
files), renders each for Kubernetes, and runs a one-step recipe on the local backend."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlrecipe.spec.catalog import CATALOG
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(REPO)], check=True, timeout=300, cwd=out)
    (path,) = out.glob("mlrecipe-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel; its dependencies come from the dev venv (no mlrecipe)."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "zz-dev-deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(purelib), str(wheel)],
                   check=True, timeout=300)
    return venv


def run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(MLRECIPE_HOME=str(cwd / "home"), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    return subprocess.run([str(venv / "bin" / "python"), "-m", "mlrecipe", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_the_wheel_holds_every_chart_as_real_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        infos = {i.filename: i for i in zf.infolist()}
    charts = "mlrecipe/_data/charts/machine-learning/"
    for name in CATALOG:
        for part in ("Chart.yaml", "values.schema.json", "charts/mlrecipe-lib/Chart.yaml",
                     "charts/mlrecipe-lib/templates/_runtime.tpl", "files/step_runtime.py"):
            assert f"{charts}{name}/{part}" in infos, f"{name}/{part} missing from the wheel"
        assert any(f.startswith(f"{charts}{name}/templates/") for f in infos)
    assert "mlrecipe/runtime/step_runtime.py" in infos
    assert "mlrecipe/_data/examples/quickstart/pipeline.yaml" in infos
    links = [n for n, i in infos.items() if (i.external_attr >> 16) & 0o170000 == 0o120000]
    assert not links, f"symlinks in the wheel: {links[:5]}"


def test_the_installed_package_renders_every_chart_and_runs_a_step(installed: Path, tmp_path: Path) -> None:
    where = run(installed, tmp_path, "paths")
    assert where.returncode == 0 and str(REPO) not in where.stdout, where.stdout + where.stderr
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("image: busybox\npvc: []\nprocess:\n  command: [echo, hello from the wheel]\n")
    for name in CATALOG:  # each chart through one of its ci scenarios that is a complete recipe
        outcomes = [run(installed, tmp_path, "template", "pkg", name, "-f", str(values), "-b", "kubernetes")
                    for values in sorted((REPO / "charts" / "machine-learning" / name / "ci").glob("*-values.yaml"))]
        rendered = [o for o in outcomes if o.returncode == 0]
        assert rendered, f"{name}: " + " | ".join(o.stderr for o in outcomes)
        assert "kind:" in rendered[0].stdout and str(REPO) not in rendered[0].stdout
    done = run(installed, tmp_path, "install", "pkg", "data-prep/data-process", "-f", str(recipe))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hello from the wheel" in run(installed, tmp_path, "logs", "pkg").stdout
    quickstart = where.stdout.split("examples", 1)[1].split()[0]
    plan = run(installed, tmp_path, "run", f"{quickstart}/quickstart/pipeline.yaml", "--dry-run")
    assert plan.returncode == 0 and "# step train" in plan.stdout, plan.stderr
