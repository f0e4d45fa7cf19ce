"""TLS material a transport presents and trusts, as PEM bytes (read from config at load time)."""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass, field

from siding.errors import ConfigError


@dataclass(frozen=True)
class ClientTls:
    """``ca_pem``: trust only this CA (else the system store); ``cert_pem`` + ``key_pem``: the
    client certificate for mutual TLS."""

    ca_pem: bytes | None = field(default=None, repr=False)
    cert_pem: bytes | None = field(default=None, repr=False)
    key_pem: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.cert_pem is None) != (self.key_pem is None):
            raise ConfigError("auth", "a client certificate needs both cert and key")

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying client context (for HTTPS)."""
        try:
            context = ssl.create_default_context(
                cadata=self.ca_pem.decode() if self.ca_pem is not None else None
            )
        except (ssl.SSLError, ValueError) as error:
            raise ConfigError("auth.ca_file", f"not a usable CA certificate: {error}") from None
        if self.cert_pem is not None and self.key_pem is not None:
            _load_client_cert(context, self.cert_pem, self.key_pem)
        return context


def _load_client_cert(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    # The ssl module loads a certificate chain from files only: write them to a private
    # folder for the moment it takes, then remove them.
    with tempfile.TemporaryDirectory(prefix="siding-tls-") as folder:
        os.chmod(folder, 0o700)
        cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
        try:
            context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as error:
            raise ConfigError(
                "auth.cert_file", f"cannot use the client certificate: {error}"
            ) from None
