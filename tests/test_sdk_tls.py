"""The SDK exports through TLS (and mutual TLS) with a bearer token, over OTLP/HTTP and OTLP/gRPC.

The certificates are made in the test (a CA, a server certificate for 127.0.0.1, a client certificate);
the receivers are real TLS servers on loopback that refuse a missing or wrong token. The agents are
real subprocesses: ``tailcut.init`` configures a process once.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
from dataclasses import dataclass
from pathlib import Path

import certifi
import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.otlp_sink import OtlpGrpcSink, OtlpSink
from tests.test_sdk_export import STATS_AGENT, run_agent

TOKEN = "s3cr3t-token"


@dataclass(frozen=True)
class Pki:
    """PEM files: the CA, the server's certificate and key, a client's certificate and key."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca)
        return context


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def _issue(
    subject: str, key, issuer: x509.Name, issuer_key, *, ca: bool = False, usage=None, ip: bool = False
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if ip:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    out = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tailcut test CA")])
    ca_cert = _issue("tailcut test CA", ca_key, ca_name, ca_key, ca=True)
    files = {"ca": ca_cert}
    keys = {}
    for who, usage in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        keys[who] = ec.generate_private_key(ec.SECP256R1())
        files[who] = _issue(
            f"tailcut test {who}", keys[who], ca_name, ca_key, usage=usage, ip=who == "server"
        )
    paths = {}
    for name, cert in files.items():
        paths[name] = out / f"{name}.pem"
        paths[name].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pki(
        ca=paths["ca"],
        server_cert=paths["server"],
        server_key=_write_key(out / "server.key", keys["server"]),
        client_cert=paths["client"],
        client_key=_write_key(out / "client.key", keys["client"]),
    )


def export(init: str = "", env: dict[str, str] | None = None) -> dict[str, int]:
    """Run the agent with these ``init`` keyword arguments and environment; its ``tailcut.stats()``.

    ``REQUESTS_CA_BUNDLE`` names the public CAs (not the test CA), as on machines that set it for
    everything: the CA file given to tailcut must win over it.
    """
    env = {"TAILCUT_SHUTDOWN_TIMEOUT": "2", "REQUESTS_CA_BUNDLE": certifi.where(), **(env or {})}
    done = run_agent(STATS_AGENT.format(init=f"service_name='tls-agent'{init}"), env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[0])


def test_http_through_tls_with_a_bearer_token(pki):
    with OtlpSink(ssl_context=pki.server_context(), token=TOKEN) as sink:
        stats = export(
            f", endpoint={sink.endpoint!r}, bearer_token={TOKEN!r}, certificate_file={str(pki.ca)!r}"
        )
    assert stats["spans_exported"] == 4 and stats["spans_dropped"] == 0
    assert sorted(span.name for _, span in sink.spans) == ["agent", *["execute_tool work"] * 3]
    assert {h["authorization"] for h in sink.headers} == {f"Bearer {TOKEN}"}


def test_the_standard_variables_alone_give_tls_and_the_token(pki):
    with OtlpSink(ssl_context=pki.server_context(), token=TOKEN) as sink:
        stats = export(
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
                "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {TOKEN},x-tenant=blue",
                "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca),
            }
        )
    assert stats["spans_exported"] == 4
    assert {h["x-tenant"] for h in sink.headers} == {"blue"}


def test_explicit_headers_add_to_the_variables_and_do_not_replace_them(pki):
    with OtlpSink(ssl_context=pki.server_context(), token=TOKEN) as sink:
        stats = export(
            f", endpoint={sink.endpoint!r}, headers={{'x-team': 'search'}}",
            env={
                "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {TOKEN}",
                "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca),
            },
        )
    assert stats["spans_exported"] == 4
    assert {(h["authorization"], h["x-team"]) for h in sink.headers} == {(f"Bearer {TOKEN}", "search")}


@pytest.mark.parametrize(
    "init",
    [
        pytest.param(", bearer_token='wrong'", id="wrong token"),
        pytest.param("", id="no token"),
    ],
)
def test_a_refused_token_loses_the_spans_and_says_so(pki, init):
    with OtlpSink(ssl_context=pki.server_context(), token=TOKEN) as sink:
        stats = export(f", endpoint={sink.endpoint!r}, certificate_file={str(pki.ca)!r}{init}")
    assert sink.headers and not sink.spans  # the requests arrived and were refused
    assert stats["spans_exported"] == 0 and stats["spans_dropped"] == 4


def test_an_untrusted_collector_certificate_is_refused(pki):
    with OtlpSink(ssl_context=pki.server_context(), token=TOKEN) as sink:
        stats = export(f", endpoint={sink.endpoint!r}, bearer_token={TOKEN!r}")  # system CAs only
    assert not sink.headers  # the TLS handshake failed before any request
    assert stats["spans_dropped"] == 4


@pytest.mark.parametrize("with_client_cert", [True, False])
def test_mutual_tls(pki, with_client_cert):
    client = (
        f", client_certificate_file={str(pki.client_cert)!r}, client_key_file={str(pki.client_key)!r}"
        if with_client_cert
        else ""
    )
    with OtlpSink(ssl_context=pki.server_context(require_client_cert=True), token=TOKEN) as sink:
        stats = export(
            f", endpoint={sink.endpoint!r}, bearer_token={TOKEN!r}, certificate_file={str(pki.ca)!r}{client}"
        )
    if with_client_cert:
        assert stats["spans_exported"] == 4 and len(sink.spans) == 4
    else:
        assert stats["spans_dropped"] == 4 and not sink.spans


@pytest.mark.parametrize("token", [TOKEN, "wrong"])
def test_grpc_through_tls_with_a_bearer_token(pki, token):
    credentials = grpc.ssl_server_credentials([(pki.server_key.read_bytes(), pki.server_cert.read_bytes())])
    with OtlpGrpcSink(credentials=credentials, token=TOKEN) as sink:
        stats = export(
            f", endpoint={sink.endpoint!r}, protocol='grpc', bearer_token={token!r},"
            f" certificate_file={str(pki.ca)!r}"
        )
    if token == TOKEN:
        assert stats["spans_exported"] == 4
        assert sorted(span.name for span in sink.spans) == ["agent", *["execute_tool work"] * 3]
    else:
        assert stats["spans_dropped"] == 4 and not sink.spans


@pytest.mark.parametrize(
    ("init", "message"),
    [
        (", certificate_file='/nonexistent/ca.pem'", "certificate_file: no such file"),
        (", client_key_file={key!r}", "client_certificate_file and client_key_file go together"),
        (", bearer_token=''", "bearer_token must be a non-empty string"),
    ],
)
def test_bad_tls_or_token_arguments_are_refused_at_init(pki, init, message):
    done = run_agent(
        "import tailcut\n"
        "try:\n"
        f"    tailcut.init(endpoint='https://127.0.0.1:1'{init.format(key=str(pki.client_key))})\n"
        "except tailcut.TailcutError as exc:\n"
        "    print(exc)\n",
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert message in done.stdout
