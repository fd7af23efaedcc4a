#!/bin/sh
# mlrecipe: run PROGRAM with each SOURCE bound at TARGET, in the private mount namespace it is started in
# (missing mount points are made in that namespace only; see mount_points.py).
# Usage: sh mount_points.sh FRESH SOURCE TARGET [SOURCE TARGET ...] -- PROGRAM [ARG ...]
#   FRESH: 'root' gives PROGRAM a root of its own (a tmpfs copy of /) even when every target exists, else '';
#   'inside': already in a root of its own that this script made (a SageMaker local-mode host's step program binds
#   its pvcs), the missing targets are made in it and the mounts stay in the caller's namespace (PROGRAM optional).
set -e
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
own_root() { r=; while read -r _ _ _ _ point rest; do [ "$point" != / ] || r=$rest; done < /proc/self/mountinfo
  case $r in *" - tmpfs mlrecipe-root "*) ;; *) return 1 ;; esac; }
missing() { while [ "$1" != -- ]; do [ -e "$2" ] || return 0; shift 2; done; return 1; }
first_dir() { while [ "$1" != -- ]; do if [ -d "$1" ]; then root=$1; return; fi; shift 2; done; }
if [ "$fresh" = inside ]; then
  own_root || fail "mount points made 'inside' need a root of this script's own, and / is not one"
  root=; made="$made
"
  mkdir -p /.mlrecipe-stage
  while [ "$1" != -- ]; do
    if [ -d "$1" ]; then make "$2" d; else make "$2" f; fi
    m --bind "$1" "$2"
    shift 2
  done
  shift; rmdir /.mlrecipe-stage
  [ $# -eq 0 ] || exec "$@"
  exit 0
fi
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
