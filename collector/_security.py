"""Who may talk to the collector: server TLS (optionally mutual) and bearer-token authentication.

Both follow the OpenTelemetry Collector's config shapes: ``tls`` blocks with ``cert_file``, ``key_file``
and ``client_ca_file`` (configtls's server settings), and the ``bearertokenauth`` extension (``token``
or ``filename``, ``scheme`` defaulting to ``Bearer``), named by a receiver's ``auth.authenticator``.
A request is authenticated when its ``authorization`` header (HTTP) or metadata entry (gRPC) is exactly
``<scheme> <token>``; the comparison takes the same time whatever the token.
"""

from __future__ import annotations

import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import grpc


@dataclass(frozen=True)
class TlsConfig:
    """A server's certificate and key, and the CA that client certificates must chain to (mutual TLS)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """A server context (TLS 1.2 or later); raises ``OSError`` or ``ssl.SSLError`` for bad files."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """The same settings as gRPC server credentials."""
        root = self.client_ca_file.read_bytes() if self.client_ca_file is not None else None
        return grpc.ssl_server_credentials(
            [(self.key_file.read_bytes(), self.cert_file.read_bytes())],
            root_certificates=root,
            require_client_auth=root is not None,
        )


@dataclass(frozen=True)
class BearerTokenAuth:
    """A ``bearertokenauth`` extension: the one ``authorization`` value it accepts."""

    name: str
    token: str = field(repr=False)
    scheme: str = "Bearer"

    def accepts(self, authorization: str | bytes | None) -> bool:
        """True when ``authorization`` is ``<scheme> <token>``."""
        if authorization is None:
            return False
        if isinstance(authorization, str):
            authorization = authorization.encode("utf-8", "surrogateescape")
        expected = f"{self.scheme} {self.token}".encode() if self.scheme else self.token.encode()
        return hmac.compare_digest(authorization, expected)


@dataclass(frozen=True)
class EndpointSecurity:
    """What a listening endpoint requires: TLS settings and an authenticator, each optional."""

    tls: TlsConfig | None = None
    auth: BearerTokenAuth | None = None
