"""A TLS reverse proxy that asks for a password (HTTP basic auth against htpasswd hashes): nginx's part of
``testing/jupyter``, in front of TensorBoard, which has no authentication of its own."""

from __future__ import annotations

import base64
import binascii
import http.client
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mlrecipe.notebook.htpasswd import Htpasswd

#: Headers that belong to one connection, not to the request or response forwarded.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
                        "transfer-encoding", "upgrade", "content-length", "host", "authorization"})
SECURITY_HEADERS = {"Strict-Transport-Security": "max-age=63072000", "X-Content-Type-Options": "nosniff"}


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic ...`` header, else ``None``."""
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


class AuthProxyHandler(BaseHTTPRequestHandler):
    """Checks the password, then forwards the request to the upstream and its answer back."""

    protocol_version = "HTTP/1.1"
    server: AuthProxy

    def _refuse(self) -> None:
        body = b"401 Unauthorized\n"
        self.send_response(401)
        self.send_header("WWW-Authenticate", f'Basic realm="{self.server.realm}", charset="UTF-8"')
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self) -> None:
        creds = basic_credentials(self.headers.get("Authorization"))
        if creds is None or not self.server.users.check(*creds):
            self._refuse()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers.update({"Host": f"127.0.0.1:{self.server.upstream}", "X-Forwarded-Proto": "https",
                        "X-Forwarded-For": self.client_address[0]})
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=120)
        try:
            conn.request(self.command, self.path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as exc:
            self.send_error(502, f"upstream: {exc.__class__.__name__}")
            return
        finally:
            conn.close()
        self.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        for key, value in SECURITY_HEADERS.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _forward


class AuthProxy(ThreadingHTTPServer):
    """``https://host:port`` -> ``http://127.0.0.1:upstream`` for the users of an htpasswd file.

    The TLS handshake happens in each connection's thread, so a slow client never blocks the others.
    """

    daemon_threads = True

    def __init__(self, host: str, port: int, upstream: int, users: Htpasswd, cert: Path, key: Path,
                 realm: str = "TensorBoard") -> None:
        super().__init__((host, port), AuthProxyHandler)
        self.upstream, self.users, self.realm = upstream, users, realm
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.minimum_version = ssl.TLSVersion.TLSv1_2
        self.tls.load_cert_chain(str(cert), str(key))

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            tls_socket = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # not TLS, or the client went away
        try:
            super().finish_request(tls_socket, client_address)
        finally:
            self.shutdown_request(tls_socket)

    def start(self) -> threading.Thread:
        """Serve in a daemon thread."""
        thread = threading.Thread(target=self.serve_forever, name="authproxy", daemon=True)
        thread.start()
        return thread
