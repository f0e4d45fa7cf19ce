"""Throwaway TLS files for the embedded broker's secured listener: a CA and a broker certificate.

Made with the ``openssl`` command line (no Python dependency); EC P-256 keys, valid for two days,
for ``127.0.0.1`` and ``localhost``. Kafka reads the broker's key and chain as a PEM keystore;
clients trust ``ca.pem``.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from siding.errors import BrokerError
from siding.jvm import require_tool

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_DAYS = "2"


@dataclass(frozen=True)
class TlsFiles:
    """``ca``: the CA certificate clients trust. ``keystore``: the broker's PKCS#8 key, its
    certificate and the CA, one PEM file (Kafka's ``ssl.keystore.type=PEM``)."""

    ca: Path
    keystore: Path


def server_extensions(hosts: tuple[str, ...]) -> str:
    """Pure: the X.509 extensions of a server certificate for ``hosts`` (IPs and DNS names)."""
    names = ",".join(
        f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts
    )
    return (
        f"subjectAltName={names}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )


def make_tls_files(folder: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A new CA and a broker certificate signed by it, written into ``folder``."""
    openssl = require_tool("openssl", "OpenSSL (e.g. `apt-get install openssl`)")
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / "broker.key", folder / "broker.csr", folder / "broker.pem"
    extensions = folder / "broker.ext"
    extensions.write_text(server_extensions(hosts))
    ca_exts = ["-addext", "basicConstraints=critical,CA:TRUE"]
    ca_exts += ["-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    _run([openssl, "req", "-x509", *_EC, "-keyout", ca_key, "-out", ca, "-days", _DAYS,
          "-subj", "/CN=siding test CA", *ca_exts])  # fmt: skip
    _run([openssl, "req", *_EC, "-keyout", key, "-out", csr, "-subj", f"/CN={hosts[0]}"])
    _run([openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
          "-out", cert, "-days", _DAYS, "-extfile", extensions])  # fmt: skip
    keystore = folder / "broker-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text() + ca.read_text())
    keystore.chmod(0o600)
    return TlsFiles(ca=ca, keystore=keystore)


def _run(command: list[str | Path]) -> None:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BrokerError(f"openssl failed ({' '.join(map(str, command[:2]))}): {done.stderr}")
