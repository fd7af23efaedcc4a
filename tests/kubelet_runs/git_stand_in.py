"""A git repository served on 127.0.0.1 over git's dumb HTTP protocol, standing in for a recipe's ``git.repo_url``
(GitHub): ``git clone http://127.0.0.1:PORT/NAME.git`` in a pod gets the files given, committed on one branch (the
commit's id is ``commit``, for a recipe that pins ``git.commit``). Records every request path, so a test sees that the
pods cloned from it."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
from pathlib import Path

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "mlrecipe tests", "GIT_AUTHOR_EMAIL": "tests@mlrecipe.invalid",
                "GIT_COMMITTER_NAME": "mlrecipe tests", "GIT_COMMITTER_EMAIL": "tests@mlrecipe.invalid"}


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), **GIT_IDENTITY}).stdout


class GitStandIn:
    """``with GitStandIn(root, "name.git", {"path/in/repo": text}, "main") as repo:`` serves the repository at
    ``repo.url``."""

    def __init__(self, root: Path, name: str, files: dict[str, str], branch: str) -> None:
        self.root, self.name, self.files, self.branch = root, name, files, branch
        self.requests: list[str] = []
        self.commit = ""  #: the id of the one commit, once served
        self._server: http.server.ThreadingHTTPServer | None = None

    def _build(self) -> Path:
        work = self.root / "work"
        work.mkdir(parents=True)
        _git("init", "-q", "-b", self.branch, cwd=work)
        for path, text in self.files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(text)
        _git("add", "-A", cwd=work)
        _git("commit", "-q", "-m", "stand-in", cwd=work)
        self.commit = _git("rev-parse", "HEAD", cwd=work).strip()
        served = self.root / "served"
        served.mkdir()
        _git("clone", "-q", "--bare", str(work), self.name, cwd=served)
        _git("update-server-info", cwd=served / self.name)
        return served

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/{self.name}"

    def __enter__(self) -> GitStandIn:
        requests = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                requests.append(self.path)
                super().do_GET()

            def log_message(self, *_args: object) -> None:
                pass

        handler = functools.partial(Handler, directory=str(self._build()))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
