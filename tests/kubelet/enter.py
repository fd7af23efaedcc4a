"""Run inside a container's fresh mount, UTS and PID namespaces (``unshare --mount --uts --pid --fork``): mount the
container's filesystem view, set its hostname, become its command. Standard library only; started as
``python3 enter.py PLAN.json`` by :mod:`tests.kubelet.container`.

The plan: ``{"hostname", "layer": [paths that get a fresh tmpfs: the image's writable /tmp, /var/tmp and /root],
"mounts": [{"source", "target", "readonly"}], "argv", "env", "workdir"}``. Every source is opened before anything is
mounted, so a source under /tmp stays reachable after /tmp is replaced.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s):
        return (s.encode() if s is not None else None)
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def main(plan_path: str) -> None:
    with open(plan_path, encoding="utf-8") as fh:
        plan = json.load(fh)
    fds = [os.open(m["source"], os.O_PATH) for m in plan["mounts"]]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in plan["layer"]:
        mode = "mode=1777" if path in ("/tmp", "/var/tmp") else "mode=0700"
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, mode)
    for mount, fd in zip(plan["mounts"], fds, strict=True):
        target = mount["target"]
        if not os.path.lexists(target):
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                open(target, "a").close()
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        if mount.get("readonly"):
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        os.close(fd)
    socket.sethostname(plan["hostname"])
    os.chdir(plan.get("workdir") or "/")
    argv, env = plan["argv"], plan["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:  # the runtime's message for a command it cannot start
        sys.stderr.write(f'exec: "{argv[0]}": {exc.strerror} (StartError)\n')
        sys.exit(128)


if __name__ == "__main__":
    main(sys.argv[1])
