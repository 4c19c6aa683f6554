"""Loading and validating the collector config (``otel-config.yaml``, in the OpenTelemetry Collector's shape).

The file has the Collector's sections (``receivers``, ``processors``, ``exporters``, ``service``); the
``processors.tail_sampling`` block uses the Collector's keys and semantics, so the same block also runs
in a Collector. tailcut-only settings live in their own ``processors.tailcut`` block. Every problem is
reported at start as one line naming the key path and what is allowed; nothing is guessed.

Without a path the default config shipped inside the package is used (the same file as the repository's
top-level ``otel-config.yaml``), so an installed wheel works from any directory.
"""

from __future__ import annotations

import importlib.resources
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from tailcut.collector._combinators import build_members
from tailcut.collector._confignode import Node, parse_endpoint
from tailcut.collector._policies import Policy
from tailcut.collector._security import BearerTokenAuth, EndpointSecurity, TlsConfig
from tailcut.collector._wal import FSYNC_MODES
from tailcut.errors import ConfigError
from tailcut.exporters.conventions.observations import ObservationRule, rules_from_config

DEFAULT_CONFIG_NAME: Final = "otel-config.yaml"
DEFAULT_HTTP: Final = ("127.0.0.1", 4318)
DEFAULT_GRPC: Final = ("127.0.0.1", 4317)
DEFAULT_METRICS: Final = ("127.0.0.1", 8888)
MIB: Final = 1024 * 1024
#: Override names accepted by :func:`load_config` (the ``tailcut collect`` options).
OVERRIDE_KEYS: Final = ("data", "http", "grpc", "metrics")


@dataclass(frozen=True)
class HttpReceiverConfig:
    """OTLP/HTTP receiver: where it listens, the largest body (also after decompression), its deadlines.

    ``read_header_timeout`` bounds the time from a request's first byte to the end of its head,
    ``read_timeout`` the time to its last byte, ``idle_timeout`` how long a keep-alive connection may wait
    for its next request (the Collector's confighttp keys).
    """

    host: str = DEFAULT_HTTP[0]
    port: int = DEFAULT_HTTP[1]
    max_request_body_size: int = 32 * MIB
    read_header_timeout: float = 10.0
    read_timeout: float = 60.0
    idle_timeout: float = 60.0
    security: EndpointSecurity = field(default_factory=EndpointSecurity)


@dataclass(frozen=True)
class GrpcReceiverConfig:
    """OTLP/gRPC receiver: where it listens and the largest (decompressed) message it accepts."""

    host: str = DEFAULT_GRPC[0]
    port: int = DEFAULT_GRPC[1]
    max_recv_msg_size: int = 32 * MIB
    security: EndpointSecurity = field(default_factory=EndpointSecurity)


@dataclass(frozen=True)
class TailSamplingConfig:
    """``processors.tail_sampling``: decision timing, memory bounds, decision caches and policies."""

    decision_wait: float = 30.0
    decision_wait_after_root_received: float = 0.0
    num_traces: int = 50_000
    sampled_cache_size: int = 0
    non_sampled_cache_size: int = 0
    sample_on_first_match: bool = False
    block_on_overflow: bool = False
    policy_specs: tuple[Any, ...] = ()

    def build_policies(self) -> list[Policy]:
        """Fresh policy objects (rate limits keep state, so each collector gets its own)."""
        return build_members(Node(list(self.policy_specs), "processors.tail_sampling.policies"), _TOP_TYPES)


@dataclass(frozen=True)
class WalConfig:
    """``processors.tailcut.wal``: the write-ahead log (see :mod:`tailcut.collector._wal`).

    ``directory`` None means ``wal`` inside a local data dir, or a local directory for an ``s3://`` one
    (:func:`~tailcut.collector._wal.wal_directory`); no log without a data dir, unless set.
    """

    enabled: bool = True
    directory: Path | None = None
    fsync: str = "interval"
    fsync_interval: float = 1.0
    max_bytes: int = 2048 * MIB
    segment_bytes: int = 16 * MIB


@dataclass(frozen=True)
class TailcutProcessorConfig:
    """``processors.tailcut``: tailcut's own limits, the anomaly-score window and the write-ahead log."""

    max_spans_per_trace: int = 10_000
    max_buffer_bytes: int = 512 * MIB
    late_span_window: float = 5.0
    anomaly_window: int = 200
    anomaly_min_window: int = 30
    wal: WalConfig = field(default_factory=WalConfig)
    #: ``observation_rules``: house failure formats, tried before the built-in observation rules
    #: (:mod:`tailcut.exporters.conventions.observations`); the classifier takes them with
    #: :func:`~tailcut.exporters.conventions.observations.with_extra`.
    observation_rules: tuple[ObservationRule, ...] = ()


@dataclass(frozen=True)
class ParquetExporterConfig:
    """``exporters.tailcut_parquet``: the data dir (a path or ``s3://bucket/prefix``) and when files roll."""

    path: str = "tailcut-data"
    roll_bytes: int = 64 * MIB
    roll_seconds: float = 60.0


@dataclass(frozen=True)
class ForwarderConfig:
    """``exporters.otlphttp`` / ``exporters.otlp``: forward kept spans to another OTLP endpoint."""

    name: str
    protocol: str  # "http" or "grpc"
    endpoint: str
    headers: Mapping[str, str] = field(default_factory=dict)
    compression: str = "gzip"
    timeout: float = 10.0
    insecure: bool = False


@dataclass(frozen=True)
class CollectorConfig:
    """A validated collector config; build one with :func:`load_config`."""

    http: HttpReceiverConfig | None = field(default_factory=HttpReceiverConfig)
    grpc: GrpcReceiverConfig | None = field(default_factory=GrpcReceiverConfig)
    metrics: tuple[str, int] | None = DEFAULT_METRICS
    metrics_security: EndpointSecurity = field(default_factory=EndpointSecurity)
    tail_sampling: TailSamplingConfig = field(default_factory=TailSamplingConfig)
    tailcut: TailcutProcessorConfig = field(default_factory=TailcutProcessorConfig)
    parquet: ParquetExporterConfig | None = field(default_factory=ParquetExporterConfig)
    forwarders: tuple[ForwarderConfig, ...] = ()
    source: str = "<defaults>"

    def with_overrides(self, overrides: Mapping[str, Any]) -> CollectorConfig:
        """A copy with command-line style overrides applied (see :func:`load_config`)."""
        unknown = set(overrides) - set(OVERRIDE_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown override(s) {', '.join(sorted(unknown))}; allowed: {', '.join(OVERRIDE_KEYS)}"
            )
        config = self
        if overrides.get("data") is not None:
            parquet = config.parquet or ParquetExporterConfig()
            config = replace(config, parquet=replace(parquet, path=os.fspath(overrides["data"])))
        if overrides.get("http") is not None:
            host, port = _endpoint_override("--http", overrides["http"])
            config = replace(config, http=replace(config.http or HttpReceiverConfig(), host=host, port=port))
        if "grpc" in overrides:
            value = overrides["grpc"]
            if value is False:
                config = replace(config, grpc=None)
            elif value is not None:
                host, port = _endpoint_override("--grpc", value)
                config = replace(
                    config, grpc=replace(config.grpc or GrpcReceiverConfig(), host=host, port=port)
                )
        if overrides.get("metrics") is not None:
            config = replace(config, metrics=_endpoint_override("--metrics", overrides["metrics"]))
        return config


def _endpoint_override(option: str, value: Any) -> tuple[str, int]:
    if isinstance(value, tuple):
        return value
    try:
        return parse_endpoint(str(value))
    except ConfigError:
        raise ConfigError(f"{option}: expected HOST:PORT, e.g. 127.0.0.1:4318, got {value!r}") from None


def default_config_text() -> str:
    """The default config shipped in the package (identical to the repository's ``otel-config.yaml``)."""
    return importlib.resources.files("tailcut.collector").joinpath(DEFAULT_CONFIG_NAME).read_text("utf-8")


def load_config(
    path: str | os.PathLike[str] | None = None, overrides: Mapping[str, Any] | None = None
) -> CollectorConfig:
    """Read, validate and return a collector config.

    Parameters
    ----------
    path
        A YAML file in the Collector's shape; None for the default config shipped with tailcut.
    overrides
        Command-line style overrides: ``data`` (the data dir), ``http`` / ``grpc`` / ``metrics``
        (``"HOST:PORT"`` or a ``(host, port)`` tuple; ``grpc=False`` disables gRPC).

    Returns
    -------
    CollectorConfig

    Raises
    ------
    ConfigError
        One line naming the file or key path and what is allowed, e.g. ``processors.tail_sampling.
        policies[2].latency.threshold_ms: expected a positive integer, got "fast"``.

    Examples
    --------
    >>> config = load_config(None, {"data": "/tmp/tailcut-data", "grpc": False})
    >>> config.grpc is None, [p.name for p in config.tail_sampling.build_policies()][-1]
    (True, 'baseline')
    """
    if path is None:
        text, source = default_config_text(), "<default otel-config.yaml>"
    else:
        source = os.fspath(path)
        try:
            text = Path(source).read_text("utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {source}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {source}: {exc}") from None
    config = parse_config(text, source)
    return config.with_overrides(overrides or {})


def parse_config(text: str, source: str = "<string>") -> CollectorConfig:
    """Validate config text (YAML); see :func:`load_config`."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    root = Node(document)
    sections = root.mapping(
        ("extensions", "receivers", "processors", "exporters", "service"), required=("service",)
    )
    service = sections["service"].mapping(("extensions", "pipelines", "telemetry"), required=("pipelines",))
    pipeline = _pipeline(service["pipelines"])
    authenticators = _extensions(
        sections.get("extensions", Node(None, "extensions")), service.get("extensions")
    )
    receivers = sections.get("receivers", Node(None, "receivers")).mapping(("otlp",))
    if "otlp" not in pipeline["receivers"] or "otlp" not in receivers:
        Node(pipeline["receivers"], "service.pipelines.traces.receivers").fail(
            'a list naming the "otlp" receiver'
        )
    http, grpc = _otlp_receiver(receivers["otlp"], authenticators)
    processors = sections.get("processors", Node(None, "processors")).mapping(("tailcut", "tail_sampling"))
    _check_processors(pipeline["processors"], processors)
    tail_sampling = _tail_sampling(processors["tail_sampling"])
    tailcut = (
        _tailcut_processor(processors["tailcut"]) if "tailcut" in processors else TailcutProcessorConfig()
    )
    parquet, forwarders = _exporters(
        sections.get("exporters", Node(None, "exporters")), pipeline["exporters"]
    )
    metrics, metrics_security = _metrics_endpoint(service.get("telemetry"), authenticators)
    return CollectorConfig(
        http=http,
        grpc=grpc,
        metrics=metrics,
        metrics_security=metrics_security,
        tail_sampling=tail_sampling,
        tailcut=tailcut,
        parquet=parquet,
        forwarders=forwarders,
        source=source,
    )


def _pipeline(pipelines_node: Node) -> dict[str, list[str]]:
    pipelines = pipelines_node.mapping(("traces",), required=("traces",))
    traces = pipelines["traces"].mapping(("receivers", "processors", "exporters"), required=("receivers",))
    names = {key: node.as_str_list() for key, node in traces.items()}
    names.setdefault("processors", [])
    names.setdefault("exporters", [])
    if not names["exporters"]:
        Node(None, "service.pipelines.traces.exporters").fail("a non-empty list of exporters")
    return names


_EXTENSION_TYPES: Final = ("bearertokenauth",)


def _extensions(node: Node, enabled: Node | None) -> dict[str, BearerTokenAuth]:
    """The ``bearertokenauth`` extensions listed in ``service.extensions``, by name."""
    value = node.value or {}
    if not isinstance(value, dict):
        node.fail("a mapping")
    defined: dict[str, Node] = {}
    for key, block in value.items():
        where = Node(block, node.child_path(str(key)))
        if str(key).partition("/")[0] not in _EXTENSION_TYPES:
            allowed = ", ".join(f"{name}[/NAME]" for name in _EXTENSION_TYPES)
            raise ConfigError(f"{where.path}: unknown extension; allowed: {allowed}")
        defined[str(key)] = where
    authenticators: dict[str, BearerTokenAuth] = {}
    listed = enabled.items() if enabled is not None else []
    for item in listed:
        name = item.as_str()
        if name not in defined:
            item.fail("an extension defined under extensions (" + ", ".join(defined) + ")")
        authenticators[name] = _bearer_token(name, defined[name])
    return authenticators


def _bearer_token(name: str, block: Node) -> BearerTokenAuth:
    keys = block.mapping(("token", "filename", "scheme"))
    scheme = keys["scheme"].as_str(allow_empty=True) if "scheme" in keys else "Bearer"
    if "filename" in keys:  # as in the Collector, a file wins over an inline token
        path = keys["filename"].as_str()
        try:
            token = Path(path).read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            keys["filename"].error(f"cannot read the token file {path}: {getattr(exc, 'strerror', exc)}")
        if not token:
            keys["filename"].error(f"the token file {path} is empty")
    elif "token" in keys:
        token = keys["token"].as_str()
    else:
        block.error("set token or filename")
    return BearerTokenAuth(name, token, scheme)


def _security(keys: dict[str, Node], authenticators: dict[str, BearerTokenAuth]) -> EndpointSecurity:
    """An endpoint's ``tls`` and ``auth`` blocks (certificates are loaded now, to fail at start)."""
    tls = auth = None
    if "tls" in keys:
        block = keys["tls"]
        tls_keys = block.mapping(
            ("cert_file", "key_file", "client_ca_file"), required=("cert_file", "key_file")
        )
        tls = TlsConfig(
            Path(tls_keys["cert_file"].as_str()),
            Path(tls_keys["key_file"].as_str()),
            Path(tls_keys["client_ca_file"].as_str()) if "client_ca_file" in tls_keys else None,
        )
        try:
            tls.ssl_context()
        except (OSError, ssl.SSLError) as exc:
            block.error(f"cannot load the certificate, key or CA: {getattr(exc, 'strerror', None) or exc}")
    if "auth" in keys:
        authenticator = keys["auth"].mapping(("authenticator",), required=("authenticator",))["authenticator"]
        name = authenticator.as_str()
        if name not in authenticators:
            listed = ", ".join(authenticators) or "none"
            authenticator.fail(f"a bearertokenauth extension listed in service.extensions ({listed})")
        auth = authenticators[name]
    return EndpointSecurity(tls, auth)


def _metrics_endpoint(
    telemetry: Node | None, authenticators: dict[str, BearerTokenAuth]
) -> tuple[tuple[str, int], EndpointSecurity]:
    """``service.telemetry.metrics``: ``address`` plus tailcut's ``tls`` and ``auth`` (receiver shape)."""
    metrics = telemetry.mapping(("metrics",)).get("metrics") if telemetry is not None else None
    if metrics is None:
        return DEFAULT_METRICS, EndpointSecurity()
    keys = metrics.mapping(("address", "tls", "auth"))
    address = keys["address"].as_endpoint() if "address" in keys else DEFAULT_METRICS
    return address, _security(keys, authenticators)


def _otlp_receiver(
    node: Node, authenticators: dict[str, BearerTokenAuth]
) -> tuple[HttpReceiverConfig | None, GrpcReceiverConfig | None]:
    protocols = node.mapping(("protocols",), required=("protocols",))["protocols"]
    enabled = protocols.mapping(("http", "grpc"))
    if not enabled:
        protocols.fail("at least one of http, grpc")
    http = grpc = None
    if "http" in enabled:
        keys = enabled["http"].mapping(
            (
                "endpoint",
                "max_request_body_size",
                "read_header_timeout",
                "read_timeout",
                "idle_timeout",
                "tls",
                "auth",
            )
        )
        host, port = keys["endpoint"].as_endpoint() if "endpoint" in keys else DEFAULT_HTTP
        defaults = HttpReceiverConfig()
        http = HttpReceiverConfig(
            host,
            port,
            keys["max_request_body_size"].as_int(minimum=1)
            if "max_request_body_size" in keys
            else defaults.max_request_body_size,
            *(
                keys[name].as_duration(positive=True) if name in keys else getattr(defaults, name)
                for name in ("read_header_timeout", "read_timeout", "idle_timeout")
            ),
            security=_security(keys, authenticators),
        )
    if "grpc" in enabled:
        keys = enabled["grpc"].mapping(("endpoint", "max_recv_msg_size_mib", "tls", "auth"))
        host, port = keys["endpoint"].as_endpoint() if "endpoint" in keys else DEFAULT_GRPC
        size = (
            keys["max_recv_msg_size_mib"].as_number(minimum=0.001) if "max_recv_msg_size_mib" in keys else 32
        )
        grpc = GrpcReceiverConfig(host, port, int(size * MIB), _security(keys, authenticators))
    return http, grpc


def _check_processors(listed: list[str], defined: dict[str, Node]) -> None:
    where = Node(listed, "service.pipelines.traces.processors")
    for index, name in enumerate(listed):
        if name not in defined:
            Node(name, where.child_path(index)).fail(
                "a processor defined under processors (" + ", ".join(defined) + ")"
            )
    if "tail_sampling" not in listed:
        where.fail('a list that includes "tail_sampling"')
    if "tailcut" in listed and listed.index("tailcut") > listed.index("tail_sampling"):
        where.error(
            '"tailcut" computes the trace signals the policies read, so it must come before "tail_sampling"'
        )


_TAIL_SAMPLING_KEYS: Final = (
    "decision_wait",
    "decision_wait_after_root_received",
    "num_traces",
    "expected_new_traces_per_sec",
    "decision_cache",
    "sample_on_first_match",
    "block_on_overflow",
    "policies",
)
_TOP_TYPES: Final = (
    "always_sample",
    "latency",
    "numeric_attribute",
    "probabilistic",
    "status_code",
    "string_attribute",
    "rate_limiting",
    "span_count",
    "boolean_attribute",
    "and",
    "not",
    "drop",
    "composite",
)


def _tail_sampling(node: Node) -> TailSamplingConfig:
    keys = node.mapping(_TAIL_SAMPLING_KEYS, required=("policies",))
    defaults = TailSamplingConfig()
    if "expected_new_traces_per_sec" in keys:  # an allocation hint in the Collector; validated, not needed
        keys["expected_new_traces_per_sec"].as_int(minimum=0)
    sampled_cache = non_sampled_cache = 0
    if "decision_cache" in keys:
        cache = keys["decision_cache"].mapping(("sampled_cache_size", "non_sampled_cache_size"))
        if "sampled_cache_size" in cache:
            sampled_cache = cache["sampled_cache_size"].as_int(minimum=0)
        if "non_sampled_cache_size" in cache:
            non_sampled_cache = cache["non_sampled_cache_size"].as_int(minimum=0)
    config = TailSamplingConfig(
        decision_wait=keys["decision_wait"].as_duration(positive=True)
        if "decision_wait" in keys
        else defaults.decision_wait,
        decision_wait_after_root_received=keys["decision_wait_after_root_received"].as_duration()
        if "decision_wait_after_root_received" in keys
        else defaults.decision_wait_after_root_received,
        num_traces=keys["num_traces"].as_int(minimum=1) if "num_traces" in keys else defaults.num_traces,
        sampled_cache_size=sampled_cache,
        non_sampled_cache_size=non_sampled_cache,
        sample_on_first_match=keys["sample_on_first_match"].as_bool()
        if "sample_on_first_match" in keys
        else False,
        block_on_overflow=keys["block_on_overflow"].as_bool() if "block_on_overflow" in keys else False,
        policy_specs=tuple(keys["policies"].value or ()),
    )
    build_members(keys["policies"], _TOP_TYPES)  # validate now, with the real key paths
    return config


def _tailcut_processor(node: Node) -> TailcutProcessorConfig:
    keys = node.mapping(
        (
            "max_spans_per_trace",
            "max_buffer_mib",
            "late_span_window",
            "anomaly_window",
            "anomaly_min_window",
            "wal",
            "observation_rules",
        )
    )
    defaults = TailcutProcessorConfig()
    window = keys["anomaly_window"].as_int(minimum=1) if "anomaly_window" in keys else defaults.anomaly_window
    min_window = defaults.anomaly_min_window
    if "anomaly_min_window" in keys:
        min_window = keys["anomaly_min_window"].as_int(minimum=1)
        if min_window > window:
            keys["anomaly_min_window"].fail(f"a positive integer <= anomaly_window ({window})")
    elif min_window > window:
        min_window = window
    return TailcutProcessorConfig(
        max_spans_per_trace=keys["max_spans_per_trace"].as_int(minimum=1)
        if "max_spans_per_trace" in keys
        else defaults.max_spans_per_trace,
        max_buffer_bytes=int(keys["max_buffer_mib"].as_number(minimum=0.001) * MIB)
        if "max_buffer_mib" in keys
        else defaults.max_buffer_bytes,
        late_span_window=keys["late_span_window"].as_duration()
        if "late_span_window" in keys
        else defaults.late_span_window,
        anomaly_window=window,
        anomaly_min_window=min_window,
        wal=_wal(keys["wal"]) if "wal" in keys else defaults.wal,
        observation_rules=_observation_rules(keys["observation_rules"])
        if "observation_rules" in keys
        else (),
    )


def _observation_rules(node: Node) -> tuple[ObservationRule, ...]:
    """``processors.tailcut.observation_rules``: a list of ``{name, pattern, kind, category, layer}``."""
    try:
        return rules_from_config(node.value, where=node.path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _wal(node: Node) -> WalConfig:
    keys = node.mapping(("enabled", "dir", "fsync", "fsync_interval", "max_size_mib", "segment_size_mib"))
    defaults = WalConfig()
    return WalConfig(
        enabled=keys["enabled"].as_bool() if "enabled" in keys else defaults.enabled,
        directory=Path(keys["dir"].as_str()) if "dir" in keys else None,
        fsync=keys["fsync"].as_choice(FSYNC_MODES) if "fsync" in keys else defaults.fsync,
        fsync_interval=keys["fsync_interval"].as_duration(positive=True)
        if "fsync_interval" in keys
        else defaults.fsync_interval,
        max_bytes=int(keys["max_size_mib"].as_number(minimum=1) * MIB)
        if "max_size_mib" in keys
        else defaults.max_bytes,
        segment_bytes=int(keys["segment_size_mib"].as_number(minimum=0.001) * MIB)
        if "segment_size_mib" in keys
        else defaults.segment_bytes,
    )


_EXPORTER_TYPES: Final = ("tailcut_parquet", "otlphttp", "otlp")


def _exporters(
    node: Node, listed: list[str]
) -> tuple[ParquetExporterConfig | None, tuple[ForwarderConfig, ...]]:
    value = node.value or {}
    if not isinstance(value, dict):
        node.fail("a mapping")
    parquet: ParquetExporterConfig | None = None
    forwarders: list[ForwarderConfig] = []
    built: dict[str, ParquetExporterConfig | ForwarderConfig] = {}
    for key, block_value in value.items():
        block = Node(block_value, node.child_path(str(key)))
        kind = str(key).partition("/")[0]
        if kind not in _EXPORTER_TYPES:
            allowed = ", ".join(f"{name}[/NAME]" for name in _EXPORTER_TYPES)
            raise ConfigError(f"{block.path}: unknown exporter; allowed: {allowed}")
        built[str(key)] = (
            _parquet_exporter(block) if kind == "tailcut_parquet" else _forwarder(str(key), kind, block)
        )
    where = Node(listed, "service.pipelines.traces.exporters")
    for index, name in enumerate(listed):
        exporter = built.get(name)
        if exporter is None:
            Node(name, where.child_path(index)).fail(
                "an exporter defined under exporters (" + ", ".join(built) + ")"
            )
        if isinstance(exporter, ParquetExporterConfig):
            if parquet is not None:
                where.error("list at most one tailcut_parquet exporter")
            parquet = exporter
        elif isinstance(exporter, ForwarderConfig):
            forwarders.append(exporter)
    return parquet, tuple(forwarders)


def _parquet_exporter(block: Node) -> ParquetExporterConfig:
    keys = block.mapping(("path", "roll_size_mib", "roll_age"))
    defaults = ParquetExporterConfig()
    return ParquetExporterConfig(
        path=keys["path"].as_str() if "path" in keys else defaults.path,
        roll_bytes=int(keys["roll_size_mib"].as_number(minimum=0.001) * MIB)
        if "roll_size_mib" in keys
        else defaults.roll_bytes,
        roll_seconds=keys["roll_age"].as_duration(positive=True)
        if "roll_age" in keys
        else defaults.roll_seconds,
    )


def _forwarder(name: str, kind: str, block: Node) -> ForwarderConfig:
    common = ("endpoint", "headers", "compression", "timeout")
    keys = block.mapping((*common, "traces_endpoint") if kind == "otlphttp" else (*common, "tls"))
    headers = keys["headers"].as_str_mapping() if "headers" in keys else {}
    compression = keys["compression"].as_choice(("gzip", "none")) if "compression" in keys else "gzip"
    timeout = keys["timeout"].as_duration(positive=True) if "timeout" in keys else 10.0
    if kind == "otlphttp":
        if "traces_endpoint" in keys:
            endpoint = keys["traces_endpoint"].as_str()
        elif "endpoint" in keys:
            endpoint = keys["endpoint"].as_str().rstrip("/") + "/v1/traces"
        else:
            block.error("set endpoint (base URL) or traces_endpoint")
        if not endpoint.startswith(("http://", "https://")):
            (keys.get("traces_endpoint") or keys["endpoint"]).fail("an http:// or https:// URL")
        return ForwarderConfig(name, "http", endpoint, headers, compression, timeout)
    if "endpoint" not in keys:
        block.error("set endpoint (HOST:PORT)")
    host, port = keys["endpoint"].as_endpoint()
    insecure = False  # as in the Collector: TLS unless tls.insecure is true
    if "tls" in keys:
        tls = keys["tls"].mapping(("insecure",))
        insecure = tls["insecure"].as_bool() if "insecure" in tls else False
    return ForwarderConfig(name, "grpc", f"{host}:{port}", headers, compression, timeout, insecure)
