"""A Hugging Face Hub stand-in on 127.0.0.1 serving one model repository from a folder, for the parts of the Hub's
HTTP API that ``huggingface_hub.snapshot_download`` (2.x) uses (``HF_ENDPOINT`` points at it): the revision and its
file tree (``GET /api/models/<repo>/revision/<rev>``, ``.../tree/<sha>``) and each file (``HEAD``/``GET
/<repo>/resolve/<sha>/<file>`` with the ``X-Repo-Commit``, ``ETag`` and ``Content-Length`` headers the client reads).
Records every request path and the ``Authorization`` header each request sent (``""`` when none)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path
from urllib.parse import unquote

SHA = "0" * 39 + "1"


class HubStandIn:
    """``with HubStandIn("org/name", folder) as hub:`` serves ``folder``'s files as that repository at ``hub.url``."""

    def __init__(self, repo_id: str, folder: Path) -> None:
        self.repo_id = repo_id
        self.files = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}
        self.requests: list[str] = []
        self.authorizations: list[str] = []
        self._server: http.server.ThreadingHTTPServer | None = None

    def __enter__(self) -> HubStandIn:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _file(self) -> Path | None:
                prefix = f"/{hub.repo_id}/resolve/"
                path = unquote(self.path.split("?", 1)[0])
                if not path.startswith(prefix):
                    return None
                _rev, _, name = path[len(prefix):].partition("/")
                return hub.files.get(name)

            def _send(self, body: bytes, content_type: str, etag: str | None = None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Repo-Commit", SHA)
                if etag:
                    self.send_header("ETag", f'"{etag}"')
                self.end_headers()

            def do_HEAD(self) -> None:
                hub.requests.append(f"HEAD {self.path}")
                hub.authorizations.append(self.headers.get("Authorization") or "")
                found = self._file()
                if found is None:
                    self.send_error(404)
                    return
                body = found.read_bytes()
                self._send(body, "application/octet-stream", hashlib.sha256(body).hexdigest())

            def do_GET(self) -> None:
                hub.requests.append(f"GET {self.path}")
                hub.authorizations.append(self.headers.get("Authorization") or "")
                if self.path.startswith(f"/api/models/{hub.repo_id}/tree/"):
                    body = json.dumps([{"type": "file", "path": n, "size": p.stat().st_size,
                                        "oid": hashlib.sha1(p.read_bytes()).hexdigest()}
                                       for n, p in hub.files.items()]).encode()
                    self._send(body, "application/json")
                    self.wfile.write(body)
                    return
                if self.path.startswith(f"/api/models/{hub.repo_id}/revision/"):
                    body = json.dumps({"id": hub.repo_id, "modelId": hub.repo_id, "sha": SHA, "private": False,
                                       "siblings": [{"rfilename": n} for n in hub.files]}).encode()
                    self._send(body, "application/json")
                    self.wfile.write(body)
                    return
                found = self._file()
                if found is None:
                    self.send_error(404)
                    return
                body = found.read_bytes()
                self._send(body, "application/octet-stream", hashlib.sha256(body).hexdigest())
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        """The endpoint, for ``HF_ENDPOINT``."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"
