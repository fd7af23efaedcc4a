"""``tritonserver`` on a host: the real Triton Inference Server that PyPI's ``nvidia-pytriton`` ships.

``make triton-env`` creates ``.venv-triton`` (Debian's Python 3.11, ``numpy<2``, torch, transformers,
``nvidia-pytriton``) and puts a ``tritonserver`` there that runs ``python -m mlrecipe.serve.tritonserver ARGS``.
Triton images map to that environment on the local backend, so a reference recipe's
``tritonserver --model-repository=... --http-port=8000 ...`` runs unchanged. This module then execs the wheel's
binary with what a container image would have set up:

- the python backend: ``--backend-directory`` of the wheel, with the backend stub for the running Python copied
  next to ``libtriton_python.so`` (done once), and the wheel's bundled libraries on ``LD_LIBRARY_PATH``;
- 127.0.0.1 for HTTP, gRPC and metrics (the recipe's addresses, if any, are replaced);
- under mlrecipe (``MLRECIPE_SERVER_PORT`` set), the HTTP port is the one the plan chose, and gRPC and metrics go
  to free ports (``MLRECIPE_TRITON_GRPC_PORT`` / ``MLRECIPE_TRITON_METRICS_PORT`` pin them), so two servers
  do not collide; the ports are printed;
- the parent directory of ``--log-file`` is created.

Standard library only: it runs in the Triton environment, where mlrecipe is installed without dependencies.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from mlrecipe.ports import free_port

#: Options whose values this launcher sets (their ``--opt=value`` / ``--opt value`` forms are dropped).
_ADDRESS_OPTS = ("--http-address", "--grpc-address", "--metrics-address")
_PORT_OPTS = ("--http-port", "--grpc-port", "--metrics-port")
HOST = "127.0.0.1"


class TritonNotInstalled(RuntimeError):
    """``nvidia-pytriton`` (which carries the server) is not importable in this environment."""


def triton_home() -> Path:
    """The wheel's ``pytriton/tritonserver`` directory (bin, backends, python_backend_stubs)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonNotInstalled(f"nvidia-pytriton is not installed in {sys.prefix}: run 'make triton-env'")
    return Path(next(iter(spec.submodule_search_locations))) / "tritonserver"


def prepare_python_backend(home: Path, version: str | None = None) -> Path:
    """Copy the python-backend stub for ``version`` (default: this Python) into ``backends/python``; return it."""
    version = version or f"{sys.version_info.major}.{sys.version_info.minor}"
    target = home / "backends" / "python" / "triton_python_backend_stub"
    source = home / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not source.is_file():
        raise TritonNotInstalled(f"nvidia-pytriton ships no python-backend stub for Python {version}")
    if not target.is_file() or target.stat().st_size != source.stat().st_size:
        tmp = target.with_suffix(".tmp")
        shutil.copy2(source, tmp)
        tmp.replace(target)
    return target


def _strip(args: list[str], names: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """``args`` without the options in ``names`` (both ``--x=v`` and ``--x v``), and the values they had."""
    out: list[str] = []
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        word = args[i]
        name, eq, value = word.partition("=")
        if name in names:
            if not eq and i + 1 < len(args):
                value, i = args[i + 1], i + 1
            seen[name] = value
        else:
            out.append(word)
        i += 1
    return out, seen


def server_argv(args: list[str], home: Path, env: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """The binary's argv for the recipe's ``args``, and the ports it will listen on."""
    args, _ = _strip(args, _ADDRESS_OPTS)
    ports: dict[str, int] = {}
    if env.get("MLRECIPE_SERVER_PORT"):
        args, _ = _strip(args, _PORT_OPTS)
        ports = {"--http-port": int(env["MLRECIPE_SERVER_PORT"]),
                 "--grpc-port": int(env.get("MLRECIPE_TRITON_GRPC_PORT") or free_port(HOST)),
                 "--metrics-port": int(env.get("MLRECIPE_TRITON_METRICS_PORT") or free_port(HOST))}
    else:
        _, given = _strip(args, _PORT_OPTS)
        defaults = {"--http-port": 8000, "--grpc-port": 8001, "--metrics-port": 8002}
        ports = {name: int(given.get(name, default)) for name, default in defaults.items()}
    extra = [f"{opt}={HOST}" for opt in _ADDRESS_OPTS]
    if not any(a.split("=", 1)[0] == "--backend-directory" for a in args):
        extra.append(f"--backend-directory={home / 'backends'}")
    if env.get("MLRECIPE_SERVER_PORT"):
        extra += [f"{name}={port}" for name, port in ports.items()]
    return [str(home / "bin" / "tritonserver"), *args, *extra], ports


def server_env(home: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the wheel's bundled libraries first on ``LD_LIBRARY_PATH``."""
    libs = home.parent.parent / "nvidia_pytriton.libs"
    paths = [str(libs), *filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))]
    return {**env, "LD_LIBRARY_PATH": ":".join(paths)}


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        home = triton_home()
        prepare_python_backend(home)
    except TritonNotInstalled as exc:
        sys.exit(f"tritonserver: {exc}")
    env = dict(os.environ)
    command, ports = server_argv(args, home, env)
    _, log = _strip(args, ("--log-file",))
    if log.get("--log-file"):
        Path(log["--log-file"]).expanduser().parent.mkdir(parents=True, exist_ok=True)
    print(f"mlrecipe: tritonserver {home / 'bin' / 'tritonserver'} on {HOST}: http {ports['--http-port']}, "
          f"grpc {ports['--grpc-port']}, metrics {ports['--metrics-port']}", file=sys.stderr, flush=True)
    os.execve(command[0], command, server_env(home, env))


if __name__ == "__main__":
    main()
