"""``testing/jupyter`` on the local backend, for real: the quickstart's training script writes TensorBoard events,
then Jupyter Lab and TensorBoard run behind TLS (a self-signed certificate made at start) on 127.0.0.1 as a serving
step. Real HTTP clients check the password (401 without it, 200 with it) and Jupyter's token; headless Chromium
takes a screenshot of TensorBoard's scalars page showing the loss curve. No password or token reaches a log, the
state or the rendered plan; ``uninstall`` stops everything.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import ssl
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from mlrecipe.ports import free_port
from tests.integration.helpers import cli, release_processes
from tests.repo import EXAMPLES

pytestmark = pytest.mark.integration
SCRIPTS = EXAMPLES / "quickstart" / "scripts"
TRAIN, LOOK = "tbtrain", "tblook"
PASSWORD = "correct horse battery staple"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass
class Look:
    """The running step: its MLRECIPE_HOME, URLs, token and the certificate clients trust."""

    home: Path
    jupyter: str
    tensorboard: str
    token: str
    tls: ssl.SSLContext
    step_dir: Path


def train_events(root: Path, home: Path) -> None:
    """The quickstart's data and training scripts (40 steps, 2 nodes): TensorBoard events under $HOME/tensorboard."""
    (root / "data.yaml").write_text(textwrap.dedent(f"""
        process:
          env: [{{name: HOME, value: "/efs/home/{{{{ .Release.Name }}}}"}}]
          command: [python3, {SCRIPTS}/prepare_data.py]
          args: ["--out /fsx/$MLRECIPE_RELEASE/data", "--vocab-size 512"]
        """))
    (root / "train.yaml").write_text(textwrap.dedent(f"""
        resources: {{nnodes: 2, nproc_per_node: 1}}
        elastic_policy: {{min_replicas: 2, max_replicas: 2}}
        launcher:
          type: torchrun
          script: {SCRIPTS}/train.py
          args: ["--data /fsx/$MLRECIPE_RELEASE/data", "--ckpt-dir $HOME/checkpoints", "--export $HOME/model",
                 "--steps 40", "--ckpt-every 40", "--batch 4"]
        train:
          env:
            - {{name: HOME, value: "/efs/home/{{{{ .Release.Name }}}}"}}
            - {{name: OMP_NUM_THREADS, value: "1"}}
        """))
    (root / "pipeline.yaml").write_text(textwrap.dedent(f"""
        release: {TRAIN}
        steps:
          - {{name: data, chart: data-prep/data-process, recipe: data.yaml}}
          - {{name: train, chart: training/pytorchjob-elastic, recipe: train.yaml}}
        """))
    done = cli(home, "run", str(root / "pipeline.yaml"), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    events = list((home / "volumes" / "pv-efs" / "home" / TRAIN / "tensorboard").glob("events.out.tfevents.*"))
    assert events, "the quickstart's training wrote TensorBoard events"


@pytest.fixture(scope="module")
def look(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Look]:
    """testing/jupyter serving the training's events; uninstalled (and checked gone) after the module."""
    for module in ("jupyterlab", "tensorboard"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (make venv installs mlrecipe[notebook])")
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command (apt-get install openssl)")
    root = tmp_path_factory.mktemp("jupyter")
    home = root / "mlhome"
    train_events(root, home)
    hashed = subprocess.run(["openssl", "passwd", "-apr1", PASSWORD], capture_output=True, text=True,
                            check=True).stdout.strip()
    tb_port = free_port()
    recipe = root / "look.yaml"
    recipe.write_text(json.dumps({
        "image": "quay.io/jupyter/pytorch-notebook:2024-10-07",
        "global": {"shared_fs": "efs", "log_dir": f"home/{TRAIN}/tensorboard", "source_cidr": "203.0.113.7/32"},
        "tensorboard": {"port": tb_port},
        "nginx": {"htpasswd": hashed},
    }))
    up = cli(home, "install", LOOK, "testing/jupyter", "-f", str(recipe), timeout=300)
    ports: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        step = json.loads((home / "releases" / "local" / "default" / LOOK / "state.json").read_text())["steps"]
        url = next(iter(step.values()))["url"]
        step_dir = home / "releases" / "local" / "default" / LOOK / "steps" / "jupyter"
        state = step_dir / "notebook"
        ports = [int(url.rsplit(":", 1)[1]), tb_port]
        yield Look(home, url, f"https://127.0.0.1:{tb_port}", (state / "jupyter-token").read_text().strip(),
                   ssl.create_default_context(cafile=str(state / "tls" / "tls.crt")), step_dir)
    finally:
        down = cli(home, "uninstall", LOOK)
        assert down.returncode == 0, down.stdout + down.stderr
        assert release_processes(LOOK, home) == []
        listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        assert not listening & set(ports), "the ports are closed"


def test_tensorboard_asks_for_the_password(look: Look) -> None:
    assert httpx.get(look.tensorboard + "/", verify=look.tls).status_code == 401
    assert httpx.get(look.tensorboard + "/", auth=("tensorboard", "wrong"), verify=look.tls).status_code == 401
    page = httpx.get(look.tensorboard + "/", auth=("tensorboard", PASSWORD), verify=look.tls)
    assert page.status_code == 200 and "tensorboard" in page.text.lower()
    tags = httpx.get(look.tensorboard + "/data/plugin/scalars/tags", auth=("tensorboard", PASSWORD),
                     verify=look.tls).json()
    assert "train/loss" in tags["."]
    points = httpx.get(look.tensorboard + "/data/plugin/scalars/scalars", params={"run": ".", "tag": "train/loss"},
                       auth=("tensorboard", PASSWORD), verify=look.tls).json()
    steps, losses = [p[1] for p in points], [p[2] for p in points]
    assert steps == list(range(1, 41))
    assert sum(losses[-5:]) < sum(losses[:5]), "the loss goes down"


def test_jupyter_lab_asks_for_its_token(look: Look) -> None:
    assert look.jupyter.startswith("https://127.0.0.1:")
    assert httpx.get(look.jupyter + "/api/status", verify=look.tls).status_code == 403
    status = httpx.get(look.jupyter + "/api/status", headers={"Authorization": f"token {look.token}"},
                       verify=look.tls)
    assert status.status_code == 200
    home = httpx.get(look.jupyter + f"/api/contents/home/{TRAIN}", headers={"Authorization": f"token {look.token}"},
                     verify=look.tls).json()
    assert "tensorboard" in {item["name"] for item in home["content"]}, "Jupyter's root is the shared volume"
    lab = httpx.get(look.jupyter + "/lab", params={"token": look.token}, verify=look.tls)
    assert lab.status_code == 200 and "JupyterLab" in lab.text
    with pytest.raises(httpx.HTTPError):
        httpx.get(look.jupyter.replace("https", "http") + "/api", timeout=5)


def test_everything_listens_on_loopback_only(look: Look) -> None:
    procs = release_processes(LOOK, look.home)
    addresses = {c.laddr.ip for p in procs for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert addresses == {"127.0.0.1"}


def test_no_password_or_token_in_logs_state_or_plan(look: Look) -> None:
    assert (look.step_dir / "notebook" / "jupyter-token").stat().st_mode & 0o777 == 0o600
    texts = [cli(look.home, "logs", LOOK).stdout, cli(look.home, "status", LOOK, "-o", "json").stdout,
             (look.home / "releases" / "local" / "default" / LOOK / "state.json").read_text(),
             (look.step_dir / "program.json").read_text(), (look.step_dir / "node-0.log").read_text()]
    assert "TensorBoard: https://127.0.0.1:" in texts[0] and "token in " in texts[0]
    for text in texts:
        assert look.token not in text and PASSWORD not in text


def chromium(profile: Path, *args: str) -> str:
    """Run headless Chromium (a fresh profile, the self-signed certificate accepted); its stdout."""
    if not Path(CHROMIUM).exists():
        pytest.skip("no headless Chromium (apt-get install chromium chromium-driver; make system-deps)")
    done = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--ignore-certificate-errors",
                           "--window-size=1280,900", *args],
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_a_browser_shows_the_loss_curve(look: Look, tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    url = look.tensorboard.replace("https://", f"https://tensorboard:{PASSWORD.replace(' ', '%20')}@") + "/#scalars"
    for attempt, budget in enumerate((20000, 40000, 60000)):  # a busy machine may draw the chart late
        shot = tmp_path / f"scalars-{attempt}.png"
        chromium(tmp_path / f"profile-{attempt}", f"--virtual-time-budget={budget}", f"--screenshot={shot}", url)
        pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
        assert pixels.shape == (900, 1280, 3)
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50, "not a blank page"
        # The run's orange line in the charts area (the sidebar's orange controls and the header left out); a page
        # without data has none there.
        r, g, b = (pixels[180:, 330:, i] for i in range(3))
        orange = int(((r > 200) & (g > 60) & (g < 170) & (b < 120)).sum())
        if orange > 100:
            break
    assert orange > 100, f"no loss curve drawn ({orange} orange pixels)"


def test_a_browser_opens_jupyter_lab_with_its_token_only(look: Look, tmp_path: Path) -> None:
    lab = chromium(tmp_path / "a", "--virtual-time-budget=30000", "--dump-dom",
                   f"{look.jupyter}/lab?token={look.token}")
    assert "<title>JupyterLab</title>" in lab and "jp-LabShell" in lab and "jp-Launcher" in lab
    login = chromium(tmp_path / "b", "--virtual-time-budget=10000", "--dump-dom", f"{look.jupyter}/lab")
    assert "jp-LabShell" not in login and 'id="token_input"' in login
