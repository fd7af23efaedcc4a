"""Mount points made inside a node's private mount namespace, never on this machine's own file systems.

:data:`MOUNT_SCRIPT` runs (as ``sh -c``) in a fresh mount namespace and binds each (source, target) pair. A
target that exists is bound over directly. When one is missing (``/fsx``, ``/opt/ml`` on a machine without them),
or a writable root is asked for, the node gets a root of its own: a tmpfs holding every entry of ``/``
(directories bound recursively, files bound, links copied), made the root with ``pivot_root``. A missing target is
then created in that tmpfs; one below an existing directory of the machine (``/opt/ml`` under ``/opt``) first gets
that directory replaced, in the namespace only, by a tmpfs copy of its entries. Nothing is written outside
the namespace's tmpfs copies. Standard library only: the SageMaker local-mode supervisor imports it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

MOUNT_SCRIPT = r"""set -e
fresh=$1; shift
here=$PWD
made='
'
m() { mount -n -c "$@"; }
fail() { echo "error: $*" >&2; exit 2; }
copy_into() {
  s=${1%/}; d=$2
  set --; for e in "$s"/* "$s"/.[!.]* "$s"/..?*; do [ ! -L "$e" ] || set -- "$@" "$e"; done
  [ $# -eq 0 ] || cp -P "$@" "$d/"
  set --; for e in "$s"/* "$s"/.[!.]* "$s"/..?*; do [ -L "$e" ] || [ ! -d "$e" ] || set -- "$@" "$d/${e##*/}"; done
  [ $# -eq 0 ] || mkdir "$@"
  for e in "$s"/* "$s"/.[!.]* "$s"/..?*; do
    if [ -L "$e" ]; then :
    elif [ -d "$e" ]; then m --rbind "$e" "$d/${e##*/}"
    elif [ -e "$e" ]; then : > "$d/${e##*/}"; m --bind "$e" "$d/${e##*/}"
    fi
  done
}
shadow() {
  m --rbind "$1" "$root/.mlrecipe-stage"
  m -t tmpfs -o "mode=$(stat -c %a "$1")" mlrecipe-mount-point "$1"
  copy_into "$root/.mlrecipe-stage" "$1"
  umount -n -c -l "$root/.mlrecipe-stage"
  made="$made$1
"
}
make() {
  p=$root; rest=${1#/}
  while [ -n "$rest" ]; do
    c=${rest%%/*}
    if [ "$c" = "$rest" ]; then rest=; else rest=${rest#*/}; fi
    [ -n "$c" ] || continue
    q=$p/$c
    [ ! -L "$q" ] || fail "mount point $1: ${q#"$root"} is a symbolic link; name the path without links"
    if [ ! -e "$q" ]; then
      case $made in *"
$p
"*) ;; *) shadow "$p" ;; esac
      if [ -z "$rest" ] && [ "$2" = f ]; then : > "$q"; else mkdir "$q"; fi
      made="$made$q
"
    elif [ -n "$rest" ] && [ ! -d "$q" ]; then fail "mount point $1: ${q#"$root"} is not a directory"
    fi
    p=$q
  done
}
missing() { while [ "$1" != -- ]; do [ -e "$2" ] || return 0; shift 2; done; return 1; }
first_dir() { while [ "$1" != -- ]; do if [ -d "$1" ]; then root=$1; return; fi; shift 2; done; }
if [ "$fresh" != root ] && ! missing "$@"; then
  while [ "$1" != -- ]; do m --bind "$1" "$2"; shift 2; done
  shift; exec "$@"
fi
root=
first_dir "$@"
[ -n "$root" ] || fail "a private root needs a directory among the mounts' sources"
m -t tmpfs -o mode=0755 mlrecipe-root "$root"
m --make-unbindable "$root"
copy_into / "$root"
m --make-private "$root"
mkdir "$root/.mlrecipe-stage" "$root/.mlrecipe-old-root"
made="$made$root
"
while [ "$1" != -- ]; do
  if [ -d "$root$1" ]; then make "$2" d; else make "$2" f; fi
  m --bind "$root$1" "$root$2"
  shift 2
done
shift
cd "$root"
pivot_root . .mlrecipe-old-root
umount -n -c -l /.mlrecipe-old-root
rmdir /.mlrecipe-old-root /.mlrecipe-stage
cd "$here" 2>/dev/null || cd /
exec "$@"
"""


def mount_argv(mounts: Sequence[tuple[str, str]], argv: list[str], *, fresh_root: bool = False) -> list[str]:
    """``argv`` run by :data:`MOUNT_SCRIPT` (already inside a private mount namespace) with ``mounts`` (source,
    target) bound in order; ``fresh_root``: a root of its own even when every target exists, so the program may
    create top-level directories (a SageMaker container's root file system) without touching this machine's."""
    pairs = [str(p) for m in mounts for p in m]
    return ["sh", "-c", MOUNT_SCRIPT, "mlrecipe-mounts", "root" if fresh_root else "", *pairs, "--", *argv]


def user_namespaces_problem(proc: Path = Path("/proc")) -> str | None:
    """Why a process not run as root cannot have mount points of its own here (user namespaces are off), or None;
    ``proc``: where the kernel's settings are read."""
    if os.geteuid() == 0:
        return None
    try:
        if int((proc / "sys/user/max_user_namespaces").read_text()) == 0:
            return "user namespaces are off (/proc/sys/user/max_user_namespaces is 0)"
    except (OSError, ValueError):
        pass
    try:
        if (proc / "sys/kernel/unprivileged_userns_clone").read_text().strip() == "0":
            return "unprivileged user namespaces are off (/proc/sys/kernel/unprivileged_userns_clone is 0)"
    except OSError:
        pass
    return None


def mount_point_problem(source: Path, target: str) -> str | None:
    """What stops ``target`` from being a mount point for ``source`` (made in a node's namespace only when
    missing): an existing entry of another kind, or a missing one whose path goes through a symbolic link (the
    link's target would be written)."""
    path = Path(target)
    if path.exists():
        if path.is_dir() != (source.is_dir() or not source.exists()):
            return f"mount point {target} is {'a directory' if path.is_dir() else 'a file'}, unlike its source {source}"
        return None
    for parent in reversed(path.parents):
        if parent.is_symlink():
            return f"mount point {target}: {parent} is a symbolic link; name the path without links"
        if parent.exists() and not parent.is_dir():
            return f"mount point {target}: {parent} is not a directory"
    return None
