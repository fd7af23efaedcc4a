"""Backend options: typed and described, from the config file and the command line; handles keep the cluster."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlrecipe.backends.base import BackendOptions, StepState
from mlrecipe.backends.kubernetes.handle import KubernetesHandle
from mlrecipe.backends.options import load_options, parse_backend_opts
from mlrecipe.backends.registry import BACKENDS, backend_class, get_backend
from mlrecipe.cli import execute
from mlrecipe.errors import ExitCode, SpecError
from mlrecipe.runner.state import ReleaseRecord, StepRecord, load_record
from tests.kubernetes.fake_cluster import FakeCluster
from tests.repo import BIN, cli_env


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_option_is_described(name: str) -> None:
    model = backend_class(name).options_type
    assert issubclass(model, BackendOptions)
    missing = [key for key, info in model.model_fields.items() if not (info.description or "").strip()]
    assert not missing, f"{name} options without a description: {missing}"


def test_command_line_wins_over_the_config_file(mlhome: Path) -> None:
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("kubernetes:\n  kubeconfig: /etc/kube.yaml\n  context: ctx-a\n")
    backend = get_backend("kubernetes", parse_backend_opts(["context=ctx-b", "stuck_timeout=5"]))
    assert (backend.options.kubeconfig, backend.options.context, backend.options.stuck_timeout) == \
        ("/etc/kube.yaml", "ctx-b", 5.0)
    assert get_backend("kubernetes").options.context == "ctx-a"


def test_bad_options_name_the_file_line_and_field(mlhome: Path) -> None:
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("local:\n  root: /data\n  stop_grace_seconds: -1\n")
    with pytest.raises(SpecError) as err:
        get_backend("local")
    issue = err.value.issues[0]
    assert (issue.file, issue.line, issue.path) == (str(mlhome / "config.yaml"), 3, "local.stop_grace_seconds")
    with pytest.raises(SpecError) as err:
        load_options(backend_class("slurm").options_type, "slurm", parse_backend_opts(["mode=sometimes"]))
    assert err.value.issues[0].file == "--backend-opt" and err.value.issues[0].path == "mode"


@pytest.mark.integration
def test_options_and_config_schema_commands(mlhome: Path) -> None:
    listed = subprocess.run([str(BIN / "mlrecipe"), "options", "kubernetes"], capture_output=True, text=True,
                            env=cli_env(mlhome), timeout=60)
    assert listed.returncode == 0 and "context (" in listed.stdout and "stuck_timeout (" in listed.stdout
    schema = subprocess.run([str(BIN / "mlrecipe"), "schema", "config"], capture_output=True, text=True,
                            env=cli_env(mlhome), timeout=60)
    doc = json.loads(schema.stdout)
    assert set(doc["properties"]) == set(BACKENDS) | {"watchdog"}  # one section per backend, and the step defaults
    assert doc["properties"]["slurm"]["properties"]["partition"]["description"]


@pytest.mark.integration
def test_kube_context_reaches_the_plan_commands(mlhome: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("image: busybox\nprocess:\n  command: [echo, hi]\n")
    done = subprocess.run([str(BIN / "mlrecipe"), "template", "r", "data-prep/data-process", "-f", str(recipe),
                           "--backend", "kubernetes", "--kube-context", "ml-team@eks"],
                          capture_output=True, text=True, env=cli_env(mlhome), timeout=120)
    assert done.returncode == 0, done.stderr
    bad = subprocess.run([str(BIN / "mlrecipe"), "template", "r", "data-prep/data-process", "-f", str(recipe),
                          "--backend", "kubernetes", "-B", "stuck_timeout=soon"],
                         capture_output=True, text=True, env=cli_env(mlhome), timeout=120)
    assert bad.returncode == 2 and "--backend-opt: stuck_timeout" in bad.stderr


def test_uninstall_reaches_the_cluster_the_step_went_to(mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clusters: list[tuple[Any, Any]] = []

    def client(kubeconfig: str | None = None, context: str | None = None) -> FakeCluster:
        clusters.append((kubeconfig, context))
        return FakeCluster(lambda: None, list, context=context or "")

    monkeypatch.setattr("mlrecipe.backends.kubernetes.backend.KubeClient", client)
    handle = KubernetesHandle(helm_release="r-train", namespace="ml", release="r", kind="PyTorchJob",
                              name="pytorchjob-r", kubeconfig="/etc/kube-a.yaml", context="ctx-a")
    record = ReleaseRecord("r", "ml", "kubernetes", {"kind": "pipeline", "path": "p.yaml"}, StepState.FAILED,
                           order=["train"])
    record.steps["train"] = StepRecord("train", "training/pytorchjob-distributed", StepState.FAILED,
                                       handle=handle.to_json())
    record.save()
    assert execute.uninstall("r", None, None, ["context=ctx-b"]) == ExitCode.OK
    assert clusters == [("/etc/kube-a.yaml", "ctx-a")], "the handle's cluster, not the command line's"
    assert load_record("kubernetes", "ml", "r") is None


def _install_big(tmp_path: Path, chart: str, recipe_text: str, opts: list[str], dry_run: bool) -> ExitCode:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(recipe_text)
    inputs = {"kind": "install", "release": "big", "chart": chart, "files": [str(recipe)], "sets": [],
              "namespace": "default"}
    return execute.run_inputs(inputs, "local", opts, dry_run, False, "text")


def test_a_local_step_far_beyond_this_machine_is_refused(mlhome: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    recipe = "pvc: []\nprocess:\n  command: [echo, hi]\nresources:\n  nnodes: 64\n"
    assert _install_big(tmp_path, "data-prep/data-process", recipe, [], True) == ExitCode.USAGE
    assert _install_big(tmp_path, "data-prep/data-process", recipe, ["max_ranks=64"], True) == ExitCode.OK
    assert load_record("local", "default", "big") is None


def test_rank_limit_message_has_the_numbers_and_the_way_out(mlhome: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    recipe = "pvc: []\ntrain:\n  command: [torchrun]\nresources:\n  nnodes: 500\n  nproc_per_node: 2\n"
    code = _install_big(tmp_path, "training/pytorchjob-distributed", recipe, [], False)
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE
    assert "500 node(s) x 2 process(es) = 1000 ranks" in err and "(16: 8 per CPU" in err
    assert "--backend-opt max_ranks=1000" in err and "nothing was started" in err


def test_a_step_that_cannot_start_is_a_failed_step_with_the_reason(mlhome: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    recipe = "process:\n  command: [echo, hi]\n"  # the default pvcs, under a volume root that cannot exist
    code = _install_big(tmp_path, "data-prep/data-process", recipe, ["root=/proc/no-such-root"], False)
    out = capsys.readouterr()
    assert code == ExitCode.FAILED
    assert "submission failed: cannot start the step's processes" in out.out and "/proc/no-such-root" in out.out
    assert "Traceback" not in out.out + out.err
    record = load_record("local", "default", "big")
    assert record is not None and record.state is StepState.FAILED
