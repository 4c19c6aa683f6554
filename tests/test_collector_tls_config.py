"""TLS and authentication settings in the Collector's config shape, and their one-line errors."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tailcut.collector import Collector, load_config
from tailcut.collector._config import default_config_text
from tailcut.errors import ConfigError
from tests.http_support import exchange, statuses
from tests.test_collector_helpers import python_env, write_config
from tests.tls_support import make_pki

HTTP = ("receivers", "otlp", "protocols", "http")
GRPC = ("receivers", "otlp", "protocols", "grpc")
METRICS = ("service", "telemetry", "metrics")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def config_with(tmp_path, changes: dict[tuple[str, ...], object]):
    """The test config with ``changes`` (key path -> value) applied."""
    path = write_config(tmp_path)
    document = yaml.safe_load(path.read_text())
    for keys, value in changes.items():
        target = document
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    path.write_text(yaml.safe_dump(document))
    return path


def tls(pki, **extra) -> dict[str, str]:
    return {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key), **extra}


AUTH = {"authenticator": "bearertokenauth"}


def test_tls_and_auth_are_read(tmp_path, pki):
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    config = load_config(
        config_with(
            tmp_path,
            {
                ("extensions",): {
                    "bearertokenauth": {"token": "inline"},
                    "bearertokenauth/agents": {"filename": str(token_file), "scheme": "Token"},
                },
                ("service", "extensions"): ["bearertokenauth", "bearertokenauth/agents"],
                (*HTTP, "tls"): tls(pki, client_ca_file=str(pki.ca)),
                (*HTTP, "auth"): {"authenticator": "bearertokenauth/agents"},
                (*GRPC, "tls"): tls(pki),
                (*METRICS, "auth"): AUTH,
            },
        )
    )
    http, grpc = config.http.security, config.grpc.security
    assert http.tls.client_ca_file == pki.ca and http.auth.accepts("Token from-a-file")
    assert not http.auth.accepts("Bearer from-a-file")
    assert grpc.tls.client_ca_file is None and grpc.auth is None
    assert config.metrics_security.tls is None and config.metrics_security.auth.accepts("Bearer inline")
    assert "inline" not in repr(config)  # tokens stay out of logs


def test_defaults_are_plain_loopback_without_auth():
    config = load_config()
    assert (config.http.host, config.grpc.host, config.metrics[0]) == ("127.0.0.1",) * 3
    assert config.http.security.tls is None and config.http.security.auth is None


ERRORS = {
    "auth names no extension": (
        {(*HTTP, "auth"): {"authenticator": "missing"}},
        "receivers.otlp.protocols.http.auth.authenticator: expected a bearertokenauth extension listed "
        'in service.extensions (none), got "missing"',
    ),
    "extension defined but not enabled": (
        {("extensions",): {"bearertokenauth": {"token": "t"}}, (*GRPC, "auth"): AUTH},
        "receivers.otlp.protocols.grpc.auth.authenticator: expected a bearertokenauth extension listed "
        'in service.extensions (none), got "bearertokenauth"',
    ),
    "enabled but not defined": (
        {("service", "extensions"): ["bearertokenauth"]},
        'service.extensions[0]: expected an extension defined under extensions (), got "bearertokenauth"',
    ),
    "unknown extension": (
        {("extensions",): {"basicauth": {}}},
        "extensions.basicauth: unknown extension; allowed: bearertokenauth[/NAME]",
    ),
    "no token": (
        {
            ("extensions",): {"bearertokenauth": {"scheme": "Bearer"}},
            ("service", "extensions"): ["bearertokenauth"],
        },
        "extensions.bearertokenauth: set token or filename",
    ),
    "unknown extension key": (
        {
            ("extensions",): {"bearertokenauth": {"tokens": ["a"]}},
            ("service", "extensions"): ["bearertokenauth"],
        },
        "extensions.bearertokenauth.tokens: unknown key; allowed: token, filename, scheme",
    ),
    "missing key_file": (
        {(*HTTP, "tls"): {"cert_file": "server.pem"}},
        "receivers.otlp.protocols.http.tls.key_file: required key is missing",
    ),
    "unknown tls key": (
        {(*HTTP, "tls"): {"cert_file": "a", "key_file": "b", "ca_file": "c"}},
        "receivers.otlp.protocols.http.tls.ca_file: unknown key; "
        "allowed: cert_file, key_file, client_ca_file",
    ),
    "unreadable certificate": (
        {(*GRPC, "tls"): {"cert_file": "no-such.pem", "key_file": "no-such-key.pem"}},
        "receivers.otlp.protocols.grpc.tls: cannot load the certificate, key or CA: "
        "No such file or directory",
    ),
    "metrics auth": (
        {(*METRICS, "auth"): {"authenticator": 3}},
        "service.telemetry.metrics.auth.authenticator: expected a non-empty string, got 3",
    ),
    "bad timeout": (
        {(*HTTP, "read_header_timeout"): "0s"},
        "receivers.otlp.protocols.http.read_header_timeout: expected a positive duration",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_config_errors_name_the_key(tmp_path, case):
    changes, message = ERRORS[case]
    with pytest.raises(ConfigError) as raised:
        load_config(config_with(tmp_path, changes))
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_token_file_that_cannot_be_read(tmp_path):
    missing = tmp_path / "absent"
    changes = {
        ("extensions",): {"bearertokenauth": {"filename": str(missing)}},
        ("service", "extensions"): ["bearertokenauth"],
    }
    with pytest.raises(ConfigError) as raised:
        load_config(config_with(tmp_path, changes))
    assert str(raised.value) == (
        f"extensions.bearertokenauth.filename: cannot read the token file {missing}: "
        "No such file or directory"
    )


def test_check_describes_security_and_errors_are_one_line(tmp_path, pki):
    good = config_with(
        tmp_path,
        {
            ("extensions",): {"bearertokenauth": {"token": "t"}},
            ("service", "extensions"): ["bearertokenauth"],
            (*HTTP, "tls"): tls(pki, client_ca_file=str(pki.ca)),
            (*HTTP, "auth"): AUTH,
        },
    )
    command = [sys.executable, "-c", "from tailcut.cli import cli; cli()", "collect", "--check", "--config"]
    result = subprocess.run(
        [*command, str(good)], capture_output=True, text=True, env=python_env(), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "otlp/http 127.0.0.1:0 (mutual TLS, auth: bearertokenauth)" in result.stdout
    bad = config_with(tmp_path, {(*HTTP, "auth"): {"authenticator": "missing"}})
    result = subprocess.run(
        [*command, str(bad)], capture_output=True, text=True, env=python_env(), timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: receivers.otlp.protocols.http.auth.authenticator: expected a bearertokenauth extension "
        'listed in service.extensions (none), got "missing"'
    ]


def readme_example() -> dict:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("### TLS and authentication", 1)[1]
    return yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])


def merged(base: dict, extra: dict) -> dict:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged(base[key], value)
        else:
            base[key] = value
    return base


def test_the_readme_example_runs(tmp_path, pki, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_pki(tmp_path / "certs")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "agent-token").write_text("agent-secret\n")
    document = merged(yaml.safe_load(default_config_text()), readme_example())
    document["exporters"]["tailcut_parquet"]["path"] = str(tmp_path / "data")
    (tmp_path / "otel-config.yaml").write_text(yaml.safe_dump(document))
    ports = {"http": "127.0.0.1:0", "grpc": "127.0.0.1:0", "metrics": "127.0.0.1:0"}
    config = load_config(tmp_path / "otel-config.yaml", ports)
    assert config.http.security.tls.client_ca_file == Path("certs/ca.pem")
    assert config.grpc.security.auth.accepts("Bearer agent-secret")
    with Collector(config) as collector:
        context = ssl.create_default_context(cafile="certs/ca.pem")
        context.load_cert_chain("certs/client.pem", "certs/client-key.pem")
        request = b"POST /v1/traces HTTP/1.1\r\nHost: c\r\nContent-Type: application/x-protobuf\r\n"
        refused = exchange(collector.ports.http, request + b"Content-Length: 0\r\n\r\n", context=context)
        authorized = (
            request + b"Authorization: Bearer agent-secret\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        )
        accepted = exchange(collector.ports.http, authorized, context=context)
    assert (statuses(refused), statuses(accepted)) == ([401], [200])
