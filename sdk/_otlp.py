"""The OTLP exporter ``tailcut.init()`` builds: endpoint, protocol, headers, token and TLS files.

Only what the caller passes is handed to OpenTelemetry's exporters; everything left out is read by the
exporters themselves from the standard variables (``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_EXPORTER_OTLP_CERTIFICATE``, ``OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE``,
``OTEL_EXPORTER_OTLP_CLIENT_KEY``, their ``_TRACES_`` forms, ``OTEL_EXPORTER_OTLP_TIMEOUT``, ...), so
tailcut never overrides them. One correction: ``requests`` lets ``REQUESTS_CA_BUNDLE`` (or
``CURL_CA_BUNDLE``) replace the CA file the HTTP exporter was given, so the exporter gets a session
where the given CA file (argument or variable) wins. A bearer token becomes an
``authorization: Bearer <token>`` header, sent with the headers of ``OTEL_EXPORTER_OTLP_HEADERS`` (an
explicit header of the same name wins).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.sdk.trace.export import SpanExporter

from tailcut import environment
from tailcut.errors import ConfigError

_logger = logging.getLogger("tailcut")

Protocol = Literal["http/protobuf", "grpc"]
PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318"
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"


@dataclass(frozen=True)
class OtlpSettings:
    """What ``tailcut.init()`` was given for its OTLP exporter (None: the exporter's own default)."""

    endpoint: str | None = None
    protocol: str | None = None
    headers: Mapping[str, str] | None = None
    bearer_token: str | None = None
    certificate_file: str | None = None
    client_certificate_file: str | None = None
    client_key_file: str | None = None

    def __post_init__(self) -> None:
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)}; got {self.protocol!r}")
        if self.bearer_token is not None and (not self.bearer_token or "\n" in self.bearer_token):
            raise ConfigError("bearer_token must be a non-empty string on one line")
        if (self.client_certificate_file is None) != (self.client_key_file is None):
            raise ConfigError("client_certificate_file and client_key_file go together (mutual TLS)")
        for name in ("certificate_file", "client_certificate_file", "client_key_file"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"{name}: no such file: {path}")


def env_endpoint() -> str | None:
    """The endpoint the standard variables name, if any."""
    return environment.get_str(environment.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or environment.get_str(
        environment.OTEL_EXPORTER_OTLP_ENDPOINT
    )


def exporter_factory(settings: OtlpSettings) -> Callable[[], SpanExporter]:
    """A function that builds the OTLP exporter (called again in a forked child, for its own connections)."""
    protocol = (
        settings.protocol
        or environment.get_str(environment.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
        or environment.get_str(environment.OTEL_EXPORTER_OTLP_PROTOCOL)
        or "http/protobuf"
    )
    if protocol not in PROTOCOLS:
        _logger.warning("tailcut: unknown OTLP protocol %r; using http/protobuf", protocol)
        protocol = "http/protobuf"
    headers = _headers(settings)
    if protocol == "grpc":
        return lambda: _grpc_exporter(settings, headers)
    return lambda: _http_exporter(settings, headers)


def _headers(settings: OtlpSettings) -> dict[str, str] | None:
    """The explicit headers with the token's, over the variables' ones; None when nothing is explicit.

    The HTTP exporter merges explicit headers over ``OTEL_EXPORTER_OTLP_HEADERS`` itself; the gRPC one
    replaces them, so the merge is done here for both.
    """
    if not settings.headers and settings.bearer_token is None:
        return None
    from opentelemetry.util.re import parse_env_headers

    raw = environment.get_str(environment.OTEL_EXPORTER_OTLP_TRACES_HEADERS) or environment.get_str(
        environment.OTEL_EXPORTER_OTLP_HEADERS
    )
    merged = parse_env_headers(raw or "", liberal=True)
    merged.update({key.lower(): value for key, value in (settings.headers or {}).items()})
    if settings.bearer_token is not None:
        merged["authorization"] = f"Bearer {settings.bearer_token}"
    return merged


def _http_exporter(settings: OtlpSettings, headers: dict[str, str] | None) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=http_traces_url(settings.endpoint),
        headers=headers,
        certificate_file=settings.certificate_file,
        client_certificate_file=settings.client_certificate_file,
        client_key_file=settings.client_key_file,
        session=_session(),
    )


_CREDENTIAL_PROVIDERS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)


def _session() -> Any:
    """A ``requests`` session where the exporter's CA file wins over ``REQUESTS_CA_BUNDLE``.

    None (the exporter's own session) when a credential provider variable names a session to use.
    """
    if any(environment.get_str(name) for name in _CREDENTIAL_PROVIDERS):
        return None
    import requests

    class CaFileFirstSession(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any):
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if verify is None and isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    return CaFileFirstSession()


def _grpc_exporter(settings: OtlpSettings, headers: dict[str, str] | None) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    credentials = None
    if settings.certificate_file or settings.client_certificate_file:
        import grpc

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as fh:
                return fh.read()

        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(settings.certificate_file),
            private_key=read(settings.client_key_file),
            certificate_chain=read(settings.client_certificate_file),
        )
    # No `insecure=`: the exporter derives it from the scheme or OTEL_EXPORTER_OTLP_INSECURE.
    return OTLPSpanExporter(
        endpoint=settings.endpoint or env_endpoint() or DEFAULT_GRPC_ENDPOINT,
        headers=headers,
        credentials=credentials,
    )


def http_traces_url(endpoint: str | None) -> str:
    """The ``/v1/traces`` URL: an explicit endpoint or the generic env var is a base URL."""
    if endpoint:
        return (
            endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
        )
    specific = environment.get_str(environment.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    if specific:
        return specific
    base = environment.get_str(environment.OTEL_EXPORTER_OTLP_ENDPOINT) or DEFAULT_HTTP_ENDPOINT
    return base.rstrip("/") + "/v1/traces"
