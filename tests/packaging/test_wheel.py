"""The package works outside the checkout.

The wheel (built straight from the checkout, as ``pip install .`` does, and from the sdist, as ``python -m build``
and ``pip install mlrecipe-*.tar.gz`` do; both from a copy of the checkout's files as a fresh clone has them: a
``*.egg-info`` left by an editable install lists package data that pyproject may not, and setuptools would take it
from there) holds every chart with its library chart and the step runtime as real
files, the mount script nodes run by path, and the examples. Installed into a fresh environment outside the
checkout, it renders every catalog chart for Kubernetes exactly as the checkout does, runs a one-step recipe on the
local backend and plans the quickstart.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from mlrecipe.spec.catalog import CATALOG
from tests.repo import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHARTS = REPO / "charts" / "machine-learning"
RUNTIME = REPO / "src" / "mlrecipe" / "runtime" / "step_runtime.py"
MOUNT_SCRIPT = REPO / "src" / "mlrecipe" / "backends" / "host" / "mount_points.sh"
HELP_TEXTS = REPO / "src" / "mlrecipe" / "cli" / "help_texts.json"
DATA = "mlrecipe/_data/"
#: The workload kind each catalog chart renders (besides its ConfigMap, Services ...).
WORKLOAD = {
    "training/pytorchjob-distributed": "PyTorchJob",
    "training/pytorchjob-elastic": "PyTorchJob",
    "training/mpijob": "MPIJob",
    "training/raytrain": "RayJob",
    "data-prep/data-process": "Job",
    "data-prep/mpijob-data-process": "MPIJob",
    "data-prep/ray-data-process": "RayJob",
    "model-prep/hf-snapshot": "Job",
    "serving/rayserve": "RayService",
    "serving/triton-inference-server": "Deployment",
    "serving/triton-inference-server-lws": "LeaderWorkerSet",
    "serving/djl-lmi-server": "Deployment",
    "serving/generic-server": "Deployment",
    "training/mpijob-horovod-tensorflow-gpu": "MPIJob",
    "testing/jupyter": "Deployment",
    "serving/sagemaker-endpoint": "",  # SageMaker only: the Kubernetes backend refuses it
}


def _pip_wheel(source: Path, out: Path) -> Path:
    out.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(source)], check=True, timeout=300, cwd=out)
    (path,) = out.glob("mlrecipe-*.whl")
    return path


def fresh_copy(target: Path) -> Path:
    """The checkout's files as a fresh clone has them (tracked, and untracked but not ignored: what is being
    added), links kept as links; no ``build/`` or ``*.egg-info`` of earlier builds."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, copy = REPO / name, target / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the working tree, not yet in git
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)
    return target


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``checkout``: ``pip wheel`` of the checkout; ``sdist``: the sdist of the checkout, then its wheel (the
    checkout: :func:`fresh_copy`)."""
    out = tmp_path_factory.mktemp("dist")
    checkout = fresh_copy(out / "tree")
    sdist_dir = out / "sdist-archive"
    sdist_dir.mkdir()
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                    "build_meta.build_sdist(sys.argv[1])", str(sdist_dir)],
                   check=True, timeout=300, cwd=checkout, capture_output=True)
    (sdist,) = sdist_dir.glob("mlrecipe-*.tar.gz")
    return {"checkout": _pip_wheel(checkout, out / "checkout"), "sdist": _pip_wheel(sdist, out / "sdist")}


def _resolved_files(root: Path) -> dict[str, Path]:
    """Every file under ``root`` as the build sees it: symlinks followed, byte-compiled files left out."""
    files: dict[str, Path] = {}
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if not name.endswith(".pyc"):
                path = Path(folder) / name
                files[path.relative_to(root).as_posix()] = path
    return files


@pytest.mark.parametrize("built", ["checkout", "sdist"])
def test_the_wheel_holds_every_chart_as_real_files(wheels: dict[str, Path], built: str) -> None:
    with zipfile.ZipFile(wheels[built]) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        runtime = RUNTIME.read_bytes()
        assert zf.read("mlrecipe/runtime/step_runtime.py") == runtime
        assert zf.read("mlrecipe/backends/host/mount_points.sh") == MOUNT_SCRIPT.read_bytes(), "nodes run it by path"
        assert zf.read("mlrecipe/cli/help_texts.json") == HELP_TEXTS.read_bytes(), "'mlrecipe VERB --help' reads it"
        library = sorted(_resolved_files(CHARTS / "library" / "mlrecipe-lib"))
        assert "Chart.yaml" in library and any(f.startswith("templates/") for f in library)
        for name in CATALOG:
            chart = f"{DATA}charts/machine-learning/{name}/"
            assert f"{chart}Chart.yaml" in infos, f"{name}: no Chart.yaml in the wheel"
            assert any(f.startswith(f"{chart}templates/") for f in infos), f"{name}: no templates in the wheel"
            for part in library:
                assert f"{chart}charts/mlrecipe-lib/{part}" in infos, f"{name}: library chart's {part} missing"
            assert zf.read(f"{chart}files/step_runtime.py") == runtime, f"{name}: not the package's runtime"
        # Everything the checkout's charts and examples hold, links resolved, byte for byte.
        for source, prefix in ((CHARTS, f"{DATA}charts/machine-learning/"), (REPO / "examples", f"{DATA}examples/")):
            for rel, path in _resolved_files(source).items():
                assert f"{prefix}{rel}" in infos, f"{prefix}{rel} missing from the wheel"
                assert zf.read(f"{prefix}{rel}") == path.read_bytes(), f"{prefix}{rel} differs from the checkout"
    assert f"{DATA}examples/quickstart/pipeline.yaml" in infos
    links = [n for n, i in infos.items() if (i.external_attr >> 16) & 0o170000 == 0o120000]
    assert not links, f"symlinks in the wheel: {links[:5]}"


def test_the_sdist_and_the_checkout_build_the_same_wheel(wheels: dict[str, Path]) -> None:
    def contents(path: Path) -> dict[str, bytes]:
        with zipfile.ZipFile(path) as zf:
            return {n: zf.read(n) for n in zf.namelist() if ".dist-info/" not in n}

    checkout, sdist = contents(wheels["checkout"]), contents(wheels["sdist"])
    assert sorted(checkout) == sorted(sdist)
    assert [n for n in checkout if checkout[n] != sdist[n]] == []


@pytest.fixture(scope="module")
def installed(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout holding the wheel; its dependencies come from the dev venv's
    site-packages through a ``.pth`` line (a plain path: the dev venv's own ``.pth`` files, among them the
    editable install's link to the checkout, are not read from there)."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "zz-dev-deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheels["checkout"])], check=True, timeout=300, cwd=venv)
    return venv


def _env(home: Path, venv: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("MLRECIPE_")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(REPO))]
    if venv is not None:
        path.insert(0, str(venv / "bin"))
    env.update(MLRECIPE_HOME=str(home), PATH=os.pathsep.join(path))
    return env


def mlrecipe(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, run from ``cwd`` (outside the checkout)."""
    return subprocess.run([str(venv / "bin" / "mlrecipe"), *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(cwd / "home", venv), timeout=300)


def checkout_template(cwd: Path, *args: str) -> tuple[int, str]:
    """``mlrecipe template ARGS`` of the dev venv's mlrecipe (the checkout, charts from ``charts/``), for comparison:
    run in this process (a render here costs a fraction of a CLI start), its environment as a fresh CLI's would be."""
    from typer.testing import CliRunner

    from mlrecipe.cli.app import app

    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("MLRECIPE_")}
    env["MLRECIPE_HOME"] = str(cwd / "checkout-home")
    here = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, ["template", *args], env=env)
    finally:
        os.chdir(here)
    return result.exit_code, result.stdout


def test_the_installed_package_is_the_one_that_runs(installed: Path, tmp_path: Path) -> None:
    probe = subprocess.run([str(installed / "bin" / "python"), "-c",
                            "import sys, mlrecipe, mlrecipe.runtime as r, mlrecipe.helm.render as h; "
                            "print(mlrecipe.__file__, r.RUNTIME_PATH, h.charts_root(), *sys.path, sep='\\n')"],
                           capture_output=True, text=True, cwd=tmp_path, env=_env(tmp_path / "home", installed),
                           timeout=120)
    assert probe.returncode == 0, probe.stderr
    module, runtime, charts, *path = probe.stdout.splitlines()
    for where in (module, runtime, charts):
        assert Path(where).is_relative_to(installed), f"{where} is not in the installed package"
    assert Path(charts).name == "machine-learning" and (Path(charts) / "library" / "mlrecipe-lib").is_dir()
    assert not [p for p in path if p.startswith(str(REPO / "src"))], path


def test_the_installed_package_renders_every_chart_for_kubernetes(installed: Path, tmp_path: Path) -> None:
    assert set(WORKLOAD) == set(CATALOG), "a catalog chart without its expected workload kind here"
    paths = mlrecipe(installed, tmp_path, "paths")
    assert paths.returncode == 0, paths.stdout + paths.stderr
    where = dict(line.split(None, 1) for line in paths.stdout.splitlines())
    charts = Path(where["charts"])
    assert charts.is_relative_to(installed), where
    runtime = RUNTIME.read_text()
    for name in CATALOG:  # each chart through the first of its ci scenarios that is a complete recipe
        scenarios = sorted((charts / name / "ci").glob("*-values.yaml"))
        assert scenarios, f"{name}: no ci scenario in the installed package"
        outcomes = []  # up to the first scenario that renders (all of them for a chart Kubernetes refuses)
        for values in scenarios:
            outcomes.append((values, mlrecipe(installed, tmp_path, "template", "pkg", name, "-f", str(values),
                                              "--backend", "kubernetes")))
            if WORKLOAD[name] and outcomes[-1][1].returncode == 0:
                break
        if not WORKLOAD[name]:
            assert all(o.returncode == 2 and "not supported on backend kubernetes" in o.stderr for _, o in outcomes)
            continue
        values, done = outcomes[-1]
        assert done.returncode == 0, f"{name}: " + " | ".join(o.stderr for _, o in outcomes)
        docs = [d for d in yaml.safe_load_all(done.stdout) if d]
        kinds = {d["kind"] for d in docs}
        assert WORKLOAD[name] in kinds, f"{name}: rendered {sorted(kinds)}"
        delivered = [d["data"]["step_runtime.py"] for d in docs
                     if d["kind"] == "ConfigMap" and "step_runtime.py" in d.get("data", {})]
        # Charts that run the recipe's command run it through the step runtime (rayserve runs Ray Serve's config).
        expected = [] if CATALOG[name].host_launch == "ray-serve" else [runtime]
        assert delivered == expected, f"{name}: the pods do not get the package's step runtime"
        assert str(REPO) not in done.stdout
        same = checkout_template(tmp_path, "pkg", name, "-f", str(values), "--backend", "kubernetes")
        assert same == (0, done.stdout), f"{name}: renders differently from the checkout"


def test_the_installed_package_runs_a_step_and_plans_the_quickstart(installed: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("image: busybox\npvc: []\nprocess:\n  command: [python3, -c]\n"
                      "  args: [\"'print(\\\"hello from the wheel\\\")'\"]\n")
    done = mlrecipe(installed, tmp_path, "install", "pkg", "data-prep/data-process", "-f", str(recipe))
    assert done.returncode == 0, done.stdout + done.stderr
    logs = mlrecipe(installed, tmp_path, "logs", "pkg")
    assert logs.returncode == 0 and "hello from the wheel" in logs.stdout, logs.stdout + logs.stderr
    assert any("hello from the wheel" in p.read_text() for p in (tmp_path / "home").rglob("*.log"))

    examples = Path(dict(line.split(None, 1) for line in mlrecipe(installed, tmp_path, "paths").stdout.splitlines())
                    ["examples"])
    assert examples.is_relative_to(installed)
    for backend, expected in (("local", "# step train"), ("kubernetes", "kind: PyTorchJob")):
        plan = mlrecipe(installed, tmp_path, "run", str(examples / "quickstart" / "pipeline.yaml"), "--dry-run",
                        "--backend", backend)
        assert plan.returncode == 0 and expected in plan.stdout, plan.stdout + plan.stderr
        assert str(REPO) not in plan.stdout, f"the {backend} plan refers to the checkout"
