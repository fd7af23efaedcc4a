"""htpasswd hashes as Apache and nginx read them: ``$apr1$`` (htpasswd -m, openssl passwd -apr1), ``$1$`` (MD5
crypt), ``{SHA}`` and, when the ``bcrypt`` package is there, ``$2y$``. Only hashes are stored, never passwords."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class HtpasswdError(ValueError):
    """An htpasswd line or hash this module cannot read."""


def _to64(value: int, count: int) -> str:
    out = []
    for _ in range(count):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(out)


def md5_crypt(password: str, salt: str, magic: str = "$apr1$") -> str:
    """The MD5-crypt hash of ``password`` (``magic`` ``$apr1$``: Apache's variant; ``$1$``: the libc one)."""
    pw, salt_b, magic_b = password.encode(), salt.encode()[:8], magic.encode()
    ctx = pw + magic_b + salt_b
    alt = hashlib.md5(pw + salt_b + pw).digest()
    for left in range(len(pw), 0, -16):
        ctx += alt[: min(16, left)]
    bits = len(pw)
    while bits:
        ctx += b"\0" if bits & 1 else pw[:1]
        bits >>= 1
    final = hashlib.md5(ctx).digest()
    for i in range(1000):
        step = (pw if i & 1 else final) + (salt_b if i % 3 else b"") + (pw if i % 7 else b"")
        final = hashlib.md5(step + (final if i & 1 else pw)).digest()
    f = final
    groups = ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5))
    text = "".join(_to64((f[a] << 16) | (f[b] << 8) | f[c], 4) for a, b, c in groups) + _to64(f[11], 2)
    return f"{magic}{salt_b.decode()}${text}"


def verify(password: str, hashed: str) -> bool:
    """Whether ``password`` matches the htpasswd hash ``hashed``; raises :class:`HtpasswdError` for unknown forms."""
    for magic in ("$apr1$", "$1$"):
        if hashed.startswith(magic):
            salt = hashed[len(magic):].split("$", 1)[0]
            return hmac.compare_digest(md5_crypt(password, salt, magic), hashed)
    if hashed.startswith("{SHA}"):
        digest = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
        return hmac.compare_digest("{SHA}" + digest, hashed)
    if hashed.startswith(("$2y$", "$2b$", "$2a$")):
        try:
            import bcrypt
        except ImportError:
            raise HtpasswdError("a bcrypt hash needs the 'bcrypt' package; use openssl passwd -apr1") from None
        return bool(bcrypt.checkpw(password.encode(), hashed.replace("$2y$", "$2b$", 1).encode()))
    raise HtpasswdError("unsupported hash (use $apr1$ from 'openssl passwd -apr1' or 'htpasswd -m', or {SHA})")


@dataclass(frozen=True)
class Htpasswd:
    """The users of an htpasswd file: user -> hash."""

    users: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> Htpasswd:
        """Read ``user:hash`` lines (blank lines and ``#`` comments skipped); every hash must be a known form."""
        users = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, hashed = line.partition(":")
            if not sep or not user or not hashed:
                raise HtpasswdError(f"line {number}: expected user:hash")
            verify("", hashed)  # raises for an unknown form
            users[user] = hashed
        if not users:
            raise HtpasswdError("no user")
        return cls(users)

    def check(self, user: str, password: str) -> bool:
        """Whether ``user`` exists and ``password`` matches its hash."""
        hashed = self.users.get(user)
        return hashed is not None and verify(password, hashed)
