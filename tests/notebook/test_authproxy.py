"""The TLS + password proxy in front of TensorBoard, against a real upstream HTTP server and a real client.

htpasswd hashes are made by ``openssl passwd`` (an independent implementation) and checked by ours.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from mlrecipe.notebook.authproxy import AuthProxy, basic_credentials
from mlrecipe.notebook.certs import self_signed
from mlrecipe.notebook.htpasswd import Htpasswd, HtpasswdError, md5_crypt, verify

PASSWORD = "s3cret pass:word"
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def openssl_hash(kind: str, password: str, salt: str) -> str:
    return subprocess.run(["openssl", "passwd", kind, "-salt", salt, password], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.integration
@needs_openssl
@pytest.mark.parametrize("password", ["", "a", PASSWORD, "x" * 40, "ünïcode"])
@pytest.mark.parametrize("kind,magic", [("-apr1", "$apr1$"), ("-1", "$1$")])
def test_md5_crypt_matches_openssl(password: str, kind: str, magic: str) -> None:
    expected = openssl_hash(kind, password, "Zq8.x/1b")
    assert md5_crypt(password, "Zq8.x/1b", magic) == expected
    assert verify(password, expected) and not verify(password + "!", expected)


def test_sha_and_unknown_hashes() -> None:
    assert verify("password", "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=")
    assert not verify("Password", "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=")
    with pytest.raises(HtpasswdError, match="unsupported"):
        verify("x", "plaintext")
    with pytest.raises(HtpasswdError, match="user:hash"):
        Htpasswd.parse("tensorboard\n")
    with pytest.raises(HtpasswdError, match="no user"):
        Htpasswd.parse("# nothing\n\n")


def test_basic_credentials() -> None:
    assert basic_credentials("Basic dTpwOnE=") == ("u", "p:q")
    assert basic_credentials("Bearer abc") is None
    assert basic_credentials("Basic !!!") is None
    assert basic_credentials(None) is None


class Upstream(BaseHTTPRequestHandler):
    """Echoes the method, path, body and the headers it was sent."""

    protocol_version = "HTTP/1.1"

    def _echo(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = json.dumps({"method": self.command, "path": self.path, "body": body.decode(),
                           "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _echo

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ssl.SSLContext]]:
    """An upstream on 127.0.0.1 and the proxy in front of it for user ``tensorboard``; (base URL, client TLS)."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    users = Htpasswd.parse(f"tensorboard:{md5_crypt(PASSWORD, 'abcdefgh')}\n")
    server = AuthProxy("127.0.0.1", 0, upstream.server_address[1], users, cert, key)
    server.start()
    client_tls = ssl.create_default_context(cafile=str(cert))
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", client_tls
    finally:
        server.shutdown()
        upstream.shutdown()


def test_without_the_password_401(proxy: tuple[str, ssl.SSLContext]) -> None:
    url, tls = proxy
    for auth in (None, ("tensorboard", "wrong"), ("admin", PASSWORD)):
        resp = httpx.get(url + "/data/runs", auth=auth, verify=tls)
        assert resp.status_code == 401
        assert resp.headers["www-authenticate"].startswith('Basic realm="TensorBoard"')


def test_with_the_password_forwarded(proxy: tuple[str, ssl.SSLContext]) -> None:
    url, tls = proxy
    resp = httpx.post(url + "/data/plugin/scalars?tag=loss", content=b"run=.", auth=("tensorboard", PASSWORD),
                      verify=tls)
    assert resp.status_code == 200
    seen = resp.json()
    assert (seen["method"], seen["path"], seen["body"]) == ("POST", "/data/plugin/scalars?tag=loss", "run=.")
    assert "authorization" not in seen["headers"], "the password stays at the proxy"
    assert seen["headers"]["x-forwarded-proto"] == "https"
    assert resp.headers["strict-transport-security"].startswith("max-age=")


def test_the_certificate_is_for_loopback_and_plain_http_fails(proxy: tuple[str, ssl.SSLContext]) -> None:
    url, tls = proxy
    assert httpx.get(url.replace("127.0.0.1", "localhost") + "/", verify=tls).status_code == 401
    with pytest.raises(httpx.HTTPError):
        httpx.get(url.replace("https", "http") + "/", timeout=5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/", timeout=5)  # the system's CAs do not know the self-signed certificate


def test_certificate_files(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "tls")
    assert cert.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert key.stat().st_mode & 0o777 == 0o600
