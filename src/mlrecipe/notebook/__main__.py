"""``python -m mlrecipe.notebook``: Jupyter Lab (TLS, token) and TensorBoard behind a TLS + password proxy, all on
127.0.0.1, until stopped. The token goes to a file only its owner reads; no secret is printed."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

from mlrecipe.notebook.authproxy import AuthProxy
from mlrecipe.notebook.certs import self_signed
from mlrecipe.notebook.htpasswd import Htpasswd
from mlrecipe.ports import free_port

HOST = "127.0.0.1"


def jupyter_token(state: Path) -> tuple[str, str]:
    """Jupyter's token (``$JUPYTER_TOKEN``, else a new one written to a file of mode 600) and where it is."""
    given = os.environ.get("JUPYTER_TOKEN")
    if given:
        return given, "$JUPYTER_TOKEN"
    token, path = secrets.token_urlsafe(32), state / "jupyter-token"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token, str(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: ports, directories and the htpasswd file."""
    parser = argparse.ArgumentParser(prog="python -m mlrecipe.notebook", description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8888")), help="Jupyter's TLS port")
    parser.add_argument("--tensorboard-port", type=int, required=True, help="the TLS + password proxy's port")
    parser.add_argument("--logdir", required=True, help="TensorBoard's event files")
    parser.add_argument("--root-dir", required=True, help="Jupyter's root directory")
    parser.add_argument("--htpasswd", type=Path, required=True, help="user:hash lines (TensorBoard's users)")
    parser.add_argument("--state-dir", type=Path, required=True, help="certificate, token, Jupyter runtime files")
    parser.add_argument("--no-jupyter", action="store_true", help="TensorBoard alone")
    return parser.parse_args(argv)


def start_children(args: argparse.Namespace, cert: Path, key: Path, token: str, tb_port: int) -> list[subprocess.Popen]:
    """Start TensorBoard on ``tb_port`` and Jupyter Lab on ``args.port``."""
    tensorboard = [sys.executable, "-m", "tensorboard.main", f"--logdir={args.logdir}", f"--host={HOST}",
                   f"--port={tb_port}", "--reload_interval=5"]
    children = [subprocess.Popen(tensorboard)]
    if not args.no_jupyter:
        jupyter = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--ip={HOST}",
                   f"--port={args.port}", "--ServerApp.port_retries=0", f"--certfile={cert}", f"--keyfile={key}",
                   f"--ServerApp.root_dir={args.root_dir}"]
        env = {**os.environ, "JUPYTER_TOKEN": token, "JUPYTER_RUNTIME_DIR": str(args.state_dir / "runtime")}
        children.append(subprocess.Popen(jupyter, env=env))
    return children


def supervise(children: list[subprocess.Popen]) -> int:
    """Wait until a child exits or a signal comes; stop the others; the exit status."""
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda num, _frame: stopping.append(num))
    status = 0
    while not stopping:
        ended = [c for c in children if c.poll() is not None]
        if ended:
            status = ended[0].returncode or 1
            argv = cast(list[str], ended[0].args)  # start_children's argv lists: python -m MODULE ...
            print(f"[notebook] {argv[2]} exited with {ended[0].returncode}", flush=True)
            break
        time.sleep(0.5)
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + 10
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
    return 0 if stopping else status


def main(argv: list[str] | None = None) -> int:
    """Run until stopped; see the module docstring."""
    args = parse_args(argv)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    args.state_dir.chmod(0o700)
    users = Htpasswd.parse(args.htpasswd.read_text(encoding="utf-8"))
    cert, key = self_signed(args.state_dir / "tls")
    token, token_at = jupyter_token(args.state_dir)
    tb_port = free_port(HOST)
    proxy = AuthProxy(HOST, args.tensorboard_port, tb_port, users, cert, key)
    proxy.start()
    children = start_children(args, cert, key, token, tb_port)
    print(f"[notebook] TensorBoard: https://{HOST}:{args.tensorboard_port}/ (user {', '.join(users.users)}; "
          f"logdir {args.logdir})", flush=True)
    if not args.no_jupyter:
        print(f"[notebook] Jupyter Lab: https://{HOST}:{args.port}/lab (token in {token_at})", flush=True)
    try:
        return supervise(children)
    finally:
        proxy.shutdown()


if __name__ == "__main__":
    sys.exit(main())
