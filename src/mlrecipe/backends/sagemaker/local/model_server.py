#!/usr/bin/env python3
"""SageMaker's hosting contract on 127.0.0.1: ``GET /ping`` and ``POST /invocations`` (standard library only).

Usage: ``python3 model_server.py ENDPOINT_DIR``. ``$SM_MODEL_DIR`` (else ``ENDPOINT_DIR/model/``) holds the
extracted model archive; its ``code/<SAGEMAKER_PROGRAM or inference.py>`` may define ``model_fn(model_dir)``,
``input_fn(body, content_type)``, ``predict_fn(data, model)`` and ``output_fn(prediction, accept)``, as for
SageMaker's PyTorch containers; the defaults below stand in for those it lacks (``model_fn``: a TorchScript
``model.pt``/``model.pth``).
When the model is loaded the server listens on a free port and writes ``ready.json`` (``{"port": N}``); when
loading fails it writes ``failed.txt`` with the reason and exits 1. Runs with the endpoint's Python (its
``python_bin_dir``), so the handler imports what that environment has.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

JSON = "application/json"
NPY = "application/x-npy"
CSV = "text/csv"


class UnsupportedType(ValueError):
    """A content type (from ``input_fn``: HTTP 415) or accept (from ``output_fn``: HTTP 406) the handler cannot
    serve."""


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (a client sees this; the traceback goes to the server's log)."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}"[:512] if message else type(exc).__name__


def refuses_type(exc: BaseException, content_type: str) -> bool:
    """Whether ``input_fn``'s error refuses the content type (HTTP 415): ours, the SageMaker inference toolkit's
    ``UnsupportedFormatError``, or any error whose message names the type (``assert content_type == JSON,
    content_type``; ``ValueError(f"unsupported {content_type}")``)."""
    return (isinstance(exc, UnsupportedType) or type(exc).__name__ == "UnsupportedFormatError"
            or (bool(content_type) and content_type in str(exc)))


def default_model_fn(model_dir: str):
    for name in ("model.pt", "model.pth"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            import torch

            return torch.jit.load(path, map_location="cpu")
    raise FileNotFoundError("code/inference.py defines no model_fn and the archive has no TorchScript model.pt")


def default_input_fn(body: bytes, content_type: str):
    if content_type == JSON:
        return json.loads(body)
    if content_type == CSV:
        return [[float(v) for v in line.split(",")] for line in body.decode().splitlines() if line.strip()]
    if content_type == NPY:
        import numpy

        return numpy.load(io.BytesIO(body), allow_pickle=False)
    if content_type.startswith("text/"):
        return body.decode()
    raise UnsupportedType(f"unsupported content type {content_type}")


def default_predict_fn(data, model):
    try:
        import torch
    except ImportError:
        return model(data)
    if isinstance(model, (torch.nn.Module, torch.jit.ScriptModule)):
        tensor = torch.as_tensor(data, dtype=torch.float32) if isinstance(data, list) else torch.as_tensor(data)
        with torch.no_grad():  # JSON and CSV bodies become float32 tensors, as in SageMaker's PyTorch containers
            return model(tensor)
    return model(data)


def default_output_fn(prediction, accept: str):
    if hasattr(prediction, "detach"):
        prediction = prediction.detach().cpu().numpy()
    if accept == NPY:
        import numpy

        buf = io.BytesIO()
        numpy.save(buf, numpy.asarray(prediction))
        return buf.getvalue()
    if hasattr(prediction, "tolist"):
        prediction = prediction.tolist()
    if accept in (JSON, "*/*"):
        return json.dumps(prediction)
    if accept == CSV:
        rows = prediction if prediction and isinstance(prediction[0], list) else [prediction]
        return "\n".join(",".join(str(v) for v in row) for row in rows)
    raise UnsupportedType(f"unsupported accept {accept}")


def load_handler(model_dir: Path) -> dict:
    """The four handler functions: the archive's ``code/`` module's where it defines them, else the defaults."""
    handler = {"model_fn": default_model_fn, "input_fn": default_input_fn, "predict_fn": default_predict_fn,
               "output_fn": default_output_fn}
    program = os.environ.get("SAGEMAKER_PROGRAM", "inference.py")
    code = model_dir / "code"
    script = code / program
    if script.is_file():
        sys.path.insert(0, str(code))
        spec = importlib.util.spec_from_file_location(script.stem, script)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {script}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        handler.update({k: getattr(module, k) for k in handler if callable(getattr(module, k, None))})
    return handler


def make_server(model_dir: Path) -> ThreadingHTTPServer:
    handler = load_handler(model_dir)
    model = handler["model_fn"](str(model_dir))
    default_accept = os.environ.get("SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT", JSON)

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/ping":
                self._reply(200, b"")
            else:
                self._reply(404, b"not found")

        def do_POST(self) -> None:
            if self.path != "/invocations":
                self._reply(404, b"not found")
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = (self.headers.get("Content-Type") or JSON).split(";")[0].strip()
            accept = (self.headers.get("Accept") or default_accept).split(",")[0].strip()
            accept = default_accept if accept == "*/*" else accept
            try:
                data = handler["input_fn"](body, content_type)
            except Exception as exc:
                traceback.print_exc()
                if refuses_type(exc, content_type):
                    self._reply(415, f"unsupported content type {content_type}: {one_line(exc)}\n".encode())
                else:
                    self._reply(400, f"the request body cannot be read: {one_line(exc)}\n".encode())
                return
            try:
                out = handler["output_fn"](handler["predict_fn"](data, model), accept)
            except UnsupportedType as exc:
                self._reply(406, f"{one_line(exc)}\n".encode())
                return
            except Exception as exc:  # one line to the caller, the traceback to the server's log
                traceback.print_exc()
                self._reply(500, f"{one_line(exc)}\n".encode())
                return
            if isinstance(out, tuple):
                out, accept = out
            self._reply(200, out.encode() if isinstance(out, str) else bytes(out), accept)

        def log_message(self, fmt: str, *args: object) -> None:
            sys.stderr.write(f"[model-server] {fmt % args}\n")

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: model_server.py ENDPOINT_DIR\n")
        return 2
    home = Path(args[0])
    try:
        server = make_server(Path(os.environ.get("SM_MODEL_DIR") or home / "model"))
    except Exception as exc:  # any loading error fails the endpoint with its reason
        traceback.print_exc()
        failed = home / "failed.txt.tmp"  # whole or not at all: a reader never sees an empty reason
        failed.write_text(f"{type(exc).__name__}: {exc}"[:1024])
        os.replace(failed, home / "failed.txt")
        return 1
    tmp = home / "ready.json.tmp"
    tmp.write_text(json.dumps({"port": server.server_address[1], "pid": os.getpid()}))
    os.replace(tmp, home / "ready.json")
    sys.stderr.write(f"[model-server] serving on 127.0.0.1:{server.server_address[1]}\n")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
