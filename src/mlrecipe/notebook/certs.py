"""A self-signed certificate for 127.0.0.1 / localhost, made at start: with ``cryptography`` when installed,
else with the ``openssl`` command."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def self_signed(directory: Path, days: int = 30) -> tuple[Path, Path]:
    """Write ``tls.crt`` and ``tls.key`` (mode 600) under ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    try:
        _with_cryptography(cert, key, days)
    except ImportError:
        _with_openssl(cert, key, days)
    os.chmod(key, 0o600)
    return cert, key


def _with_openssl(cert: Path, key: Path, days: int) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("neither the 'cryptography' package nor the 'openssl' command is available to make a "
                           "TLS certificate (apt-get install openssl)")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days),
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)


def _with_cryptography(cert: Path, key: Path, days: int) -> None:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    built = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now)
             .not_valid_after(now + datetime.timedelta(days=days)).add_extension(san, critical=False)
             .sign(private, hashes.SHA256()))
    key.touch(mode=0o600)
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    cert.write_bytes(built.public_bytes(serialization.Encoding.PEM))
