"""Certificates made in the test (a CA, a server and a client certificate) and secured configs (no tests)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.test_collector_helpers import write_config

TOKEN = "s3cret-token"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed neither certificate


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    usage: Any = None,
    san: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if san:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    """A CA, a server certificate for localhost / 127.0.0.1 and a client certificate, as PEM files."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("tailcut test CA", ca_key, None)
    for name, subject, usage, san in (
        ("server", "localhost", ExtendedKeyUsageOID.SERVER_AUTH, True),
        ("client", "agent", ExtendedKeyUsageOID.CLIENT_AUTH, False),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = _certificate(subject, key, (ca.subject, ca_key), usage=usage, san=san)
        files[f"{name}_cert"] = directory / f"{name}.pem"
        files[f"{name}_cert"].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        files[f"{name}_key"] = directory / f"{name}-key.pem"
        _write_key(key, files[f"{name}_key"])
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _certificate("another CA", other_key, None)
    (directory / "other-ca.pem").write_bytes(other.public_bytes(serialization.Encoding.PEM))
    return Pki(ca=directory / "ca.pem", other_ca=directory / "other-ca.pem", **files)


def secured_config(
    directory: Path,
    pki: Pki,
    *,
    mutual: bool = False,
    token: str | None = TOKEN,
    metrics: bool = False,
    **config: Any,
) -> Path:
    """A collector config with TLS on both receivers (mutual: client certificates required) and auth."""
    tls: dict[str, str] = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}
    if mutual:
        tls["client_ca_file"] = str(pki.ca)
    secured: dict[str, Any] = {"tls": tls}
    if token is not None:
        secured["auth"] = {"authenticator": "bearertokenauth"}
    path = write_config(directory, http=secured, grpc=secured, **config)
    document = yaml.safe_load(path.read_text())
    if token is not None:
        document["extensions"] = {"bearertokenauth": {"token": token}}
        document["service"]["extensions"] = ["bearertokenauth"]
    if metrics:
        document["service"]["telemetry"]["metrics"].update(secured)
    path.write_text(yaml.safe_dump(document))
    return path
