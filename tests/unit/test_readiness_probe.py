"""The readiness probe of serving steps (:mod:`mlrecipe.backends.host.serving`) against servers on 127.0.0.1 run in
a thread: a port that answers in another protocol (seen on Slurm: a Ray port that answered gRPC bytes) is "not
ready", never a traceback that ends the CLI."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

from mlrecipe.backends.host.serving import health_problem, probe


class NotHttp(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.recv(1024)
        self.request.sendall(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x05\x00@\x00\x00\xfe")  # HTTP/2 SETTINGS


class Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(server: socketserver.TCPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/health"
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_that_answers_another_protocol_is_not_ready() -> None:
    with serving(socketserver.TCPServer(("127.0.0.1", 0), NotHttp)) as url:
        assert probe(url) is False
        problem = health_problem(url)
        assert problem is not None and problem.startswith(f"GET {url} was not answered in HTTP"), problem


def test_an_http_server_that_answers_200_is_ready() -> None:
    with serving(HTTPServer(("127.0.0.1", 0), Healthy)) as url:
        assert probe(url) is True and health_problem(url) is None
