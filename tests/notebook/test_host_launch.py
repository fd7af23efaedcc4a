"""testing/jupyter's host launch: what it needs, and the same directories as the chart renders."""

from __future__ import annotations

from pathlib import Path

import yaml

from mlrecipe.backends.host import jupyter
from mlrecipe.helm.render import charts_root, render_chart
from mlrecipe.spec.load import load_step_release

HASH = "$apr1$abcdefgh$d0qlbYUD2bEPQoIswpXd0/"


def step(tmp_path: Path, values: dict):
    recipe = tmp_path / "look.yaml"
    recipe.write_text(yaml.safe_dump(values))
    return load_step_release("look", "testing/jupyter", [str(recipe)]).steps[0]


def test_the_password_hash_is_required(tmp_path: Path) -> None:
    assert "nginx.htpasswd is required" in jupyter.problems(step(tmp_path, {"image": "img:1"}))[0]
    bad = step(tmp_path, {"image": "img:1", "nginx": {"htpasswd": "plaintext"}})
    assert "unsupported hash" in jupyter.problems(bad)[0]
    assert jupyter.problems(step(tmp_path, {"image": "img:1", "nginx": {"htpasswd": HASH}})) == []


def test_launch_reads_the_charts_directories(tmp_path: Path) -> None:
    values = {"image": "img:1", "global": {"shared_fs": "efs", "log_dir": "/home/my run/tb/"},
              "nginx": {"htpasswd": HASH, "user": "viewer"}, "tensorboard": {"port": 16443}}
    launch = jupyter.launch(step(tmp_path, values), tmp_path / "state")
    assert launch.command == ["python3", "-m", "mlrecipe.notebook"]
    args = " ".join(launch.args)
    assert "--logdir '/efs/home/my run/tb'" in args and "--root-dir /efs" in args
    assert "--tensorboard-port 16443" in args and "--port $PORT" in args
    assert launch.files[tmp_path / "state" / "notebook" / "htpasswd"] == f"viewer:{HASH}\n"
    objs = render_chart(charts_root() / "testing/jupyter", values, "look", "ns")
    pod = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["LOGDIR"] == "/efs/home/my run/tb"
    assert "--logdir=/efs/home/my run/tb" in pod["containers"][1]["args"]


def test_chart_exposes_only_to_the_source_cidr(tmp_path: Path) -> None:
    chart = charts_root() / "testing/jupyter"
    closed = render_chart(chart, {"image": "img:1"}, "look", "ns")
    assert next(o for o in closed if o["kind"] == "Service")["spec"]["type"] == "ClusterIP"
    opened = render_chart(chart, {"image": "img:1", "global": {"source_cidr": "198.51.100.4/32"}}, "look", "ns")
    service = next(o for o in opened if o["kind"] == "Service")["spec"]
    assert service["type"] == "LoadBalancer" and service["loadBalancerSourceRanges"] == ["198.51.100.4/32"]
    conf = next(o for o in opened if o["kind"] == "ConfigMap" and "nginx.conf" in o["data"])["data"]["nginx.conf"]
    assert "allow 198.51.100.4/32;" in conf and "deny all;" in conf and "auth_basic_user_file" in conf
