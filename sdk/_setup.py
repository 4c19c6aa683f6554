"""``tailcut.init()``: connect the SDK to an OpenTelemetry pipeline, once per process."""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from tailcut import _config, environment
from tailcut._processor import RecordingSpanProcessor
from tailcut._threads import thread_context
from tailcut._version import __version__
from tailcut.errors import ConfigError
from tailcut.payloads import PayloadStore

_logger = logging.getLogger("tailcut")

Protocol = Literal["http/protobuf", "grpc"]
_PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318"
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"

_init_lock = threading.Lock()
_processor: RecordingSpanProcessor | None = None
_provider: TracerProvider | None = None


def init(
    service_name: str | None = None,
    endpoint: str | None = None,
    *,
    protocol: Protocol | None = None,
    headers: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
    tracer_provider: TracerProvider | None = None,
    auto_instrument: bool = False,
    redact: Callable[..., Any] | None = None,
    redact_defaults: bool = True,
    capture_content: bool | Mapping[str, bool] | None = None,
    inline_limit: int | None = None,
    payload_dir: str | None = None,
    harness_revision: str | None = None,
    env_revision: str | None = None,
    max_queue_size: int | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    propagate_context_to_threads: bool = True,
) -> TracerProvider:
    """Start recording: every instrumented boundary becomes a span exported over OTLP.

    Call it once, at start-up; a second call warns and changes nothing. Each option falls back to its
    environment variable (the standard ``OTEL_*`` ones for the exporter and service name, ``TAILCUT_*``
    for the rest), then to its default.

    Parameters
    ----------
    service_name
        ``service.name`` of the agent (``OTEL_SERVICE_NAME``).
    endpoint
        Where to send spans: the collector's base URL, e.g. ``http://127.0.0.1:4318``
        (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` used as is, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` plus
        ``/v1/traces``). Default: ``http://127.0.0.1:4318`` (``:4317`` for gRPC).
    protocol
        ``http/protobuf`` (default) or ``grpc`` (``OTEL_EXPORTER_OTLP_PROTOCOL``).
    headers
        Extra headers for the exporter (``OTEL_EXPORTER_OTLP_HEADERS``).
    exporter
        Any ``SpanExporter`` to use instead of OTLP, e.g. ``tailcut.exporters.ParquetSpanExporter``.
    tracer_provider
        Add tailcut to this provider. By default an application that already set an SDK
        ``TracerProvider`` keeps it, and tailcut adds its exporter only when an endpoint or exporter is
        given; otherwise tailcut creates and registers one.
    auto_instrument
        Also instrument the ``openai`` and ``anthropic`` SDKs (those that are installed).
    redact
        A hook ``redact(value, *, kind, field) -> value`` run on every payload after the default
        redaction (API keys, bearer tokens, credential-named keys), before anything leaves the process.
    redact_defaults
        Whether the default redaction runs (keep it on unless ``redact`` does the same job).
    capture_content
        ``False`` records only hashes and sizes of payloads; a mapping sets it per kind, e.g.
        ``{"llm": False}`` (``TAILCUT_CAPTURE_CONTENT``).
    inline_limit
        Largest payload kept inline on the span, in bytes; larger ones go to the payload store
        (``TAILCUT_INLINE_LIMIT``, default 65536; capped by ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``).
    payload_dir
        Directory of the payload store (``TAILCUT_PAYLOAD_DIR``, default ``.tailcut/payloads``).
    harness_revision, env_revision
        Defaults for every run (``TAILCUT_HARNESS_REVISION``, ``TAILCUT_ENV_REVISION``).
    max_queue_size
        Spans buffered while the exporter catches up (``TAILCUT_MAX_QUEUE_SIZE``, default 65536).
    resource_attributes
        Extra resource attributes (``OTEL_RESOURCE_ATTRIBUTES`` is read as well).
    propagate_context_to_threads
        Make threads and thread pools inherit the caller's context, so their spans join the run.

    Returns
    -------
    TracerProvider
        The provider tailcut records through.
    """
    global _processor, _provider
    with _init_lock:
        if _provider is not None:
            _logger.warning("tailcut.init() was already called; this call changes nothing")
            return _provider
        if protocol is not None and protocol not in _PROTOCOLS:
            raise ConfigError(f"protocol must be one of {', '.join(_PROTOCOLS)}; got {protocol!r}")
        if inline_limit is not None and inline_limit < 1:
            raise ConfigError(f"inline_limit must be a positive number of bytes; got {inline_limit}")

        provider, owned = _resolve_provider(tracer_provider, service_name, resource_attributes)
        if exporter is None and (owned or endpoint or _env_endpoint()):
            exporter = _otlp_exporter(endpoint, protocol, headers)
        if exporter is not None:
            queue = max_queue_size or environment.get_int(
                environment.TAILCUT_MAX_QUEUE_SIZE, environment.DEFAULT_MAX_QUEUE_SIZE
            )
            _processor = RecordingSpanProcessor(exporter, max_queue_size=queue)
            provider.add_span_processor(_processor)
        _provider = provider
        _config.install(
            _recording_config(
                provider.get_tracer("tailcut", __version__),
                redact=redact,
                redact_defaults=redact_defaults,
                capture_content=capture_content,
                inline_limit=inline_limit,
                payload_dir=payload_dir,
                harness_revision=harness_revision,
                env_revision=env_revision,
            )
        )
        if propagate_context_to_threads:
            thread_context.apply()
        atexit.register(shutdown)
    if auto_instrument:
        from tailcut.instrumentation import instrument_all

        instrument_all()
    return provider


def enable(tracer_provider: trace.TracerProvider | None = None) -> bool:
    """Start recording through an OpenTelemetry pipeline someone else set up, adding no exporter.

    This is what ``opentelemetry-instrument python agent.py`` needs: the OpenTelemetry distro owns the
    tracer provider and its exporters, and tailcut's instrumentors only turn recording on. Options come
    from the environment, as for :func:`init`. Does nothing when :func:`init` already ran or recording
    is already on (e.g. inside :func:`tailcut.testing.capture_spans`).

    Parameters
    ----------
    tracer_provider
        The provider to record through; default the global one (a proxy until the application sets
        one, so the order of set-up does not matter).

    Returns
    -------
    bool
        True when this call turned recording on.
    """
    with _init_lock:
        if _provider is not None or _config.current().enabled:
            return False
        _config.install(
            _recording_config(trace.get_tracer("tailcut", __version__, tracer_provider=tracer_provider))
        )
        return True


def _recording_config(
    tracer: trace.Tracer,
    *,
    redact: Callable[..., Any] | None = None,
    redact_defaults: bool = True,
    capture_content: bool | Mapping[str, bool] | None = None,
    inline_limit: int | None = None,
    payload_dir: str | None = None,
    harness_revision: str | None = None,
    env_revision: str | None = None,
) -> _config.Config:
    """The recording configuration: each option, else its environment variable, else its default."""
    capture_default = environment.get_bool(environment.TAILCUT_CAPTURE_CONTENT, True)
    limit = inline_limit or environment.get_int(
        environment.TAILCUT_INLINE_LIMIT, environment.DEFAULT_INLINE_LIMIT
    )
    otel_limit = environment.get_str(
        environment.OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT
    ) or environment.get_str(environment.OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT)
    if otel_limit and otel_limit.isdigit() and int(otel_limit) < limit:
        # The SDK would cut longer attributes (into invalid JSON); offload before it can.
        limit = int(otel_limit)
    return _config.Config(
        enabled=True,
        tracer=tracer,
        redact=redact,
        redact_defaults=redact_defaults,
        capture_content=_config.normalize_capture_content(capture_content, capture_default),
        inline_limit=limit,
        payload_store=PayloadStore(
            payload_dir
            or environment.get_str(environment.TAILCUT_PAYLOAD_DIR)
            or environment.DEFAULT_PAYLOAD_DIR
        ),
        harness_revision=harness_revision,
        env_revision=env_revision,
    )


def _resolve_provider(
    explicit: TracerProvider | None, service_name: str | None, resource_attributes: Mapping[str, Any] | None
) -> tuple[TracerProvider, bool]:
    """The provider to record through, and whether tailcut created it."""
    if explicit is not None:
        return explicit, False
    existing = trace.get_tracer_provider()
    if isinstance(existing, TracerProvider):
        return existing, False
    attributes: dict[str, Any] = dict(resource_attributes or {})
    if service_name:
        attributes["service.name"] = service_name
    provider = TracerProvider(resource=Resource.create(attributes))
    trace.set_tracer_provider(provider)
    return provider, True


def _env_endpoint() -> str | None:
    return environment.get_str(environment.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or environment.get_str(
        environment.OTEL_EXPORTER_OTLP_ENDPOINT
    )


def _otlp_exporter(
    endpoint: str | None, protocol: str | None, headers: Mapping[str, str] | None
) -> SpanExporter:
    """The standard OTLP exporter for the resolved endpoint and protocol (imported only when used)."""
    protocol = (
        protocol
        or environment.get_str(environment.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
        or environment.get_str(environment.OTEL_EXPORTER_OTLP_PROTOCOL)
        or "http/protobuf"
    )
    if protocol not in _PROTOCOLS:
        _logger.warning("tailcut: unknown OTLP protocol %r; using http/protobuf", protocol)
        protocol = "http/protobuf"
    extra = {"headers": dict(headers)} if headers else {}
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        target = endpoint or _env_endpoint() or DEFAULT_GRPC_ENDPOINT
        return GrpcExporter(endpoint=target, insecure=target.startswith("http://"), **extra)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=_http_traces_url(endpoint), **extra)


def _http_traces_url(endpoint: str | None) -> str:
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


def force_flush(timeout_millis: int = 30000) -> bool:
    """Export every span recorded so far; True when all went out in time."""
    provider = _provider
    if provider is None:
        return True
    return bool(provider.force_flush(timeout_millis))


def shutdown() -> None:
    """Flush and stop exporting (registered to run at exit, so a short-lived agent loses nothing)."""
    global _processor, _provider
    with _init_lock:
        processor, _processor = _processor, None
        provider, _provider = _provider, None
    if processor is not None:
        processor.shutdown()
    if provider is not None:
        _config.install(_config.Config())
        thread_context.restore()
        dropped = _config.counters.get("spans_dropped")
        if dropped:
            _logger.warning("tailcut: %d span(s) were lost in this process; see tailcut.stats()", dropped)


def stats() -> dict[str, int]:
    """Counts of what the SDK exported and what it could not record (nothing is lost silently).

    Keys: ``spans_exported``, ``spans_dropped`` (every span lost, whatever the reason),
    ``spans_export_failed`` (of those, the ones the exporter refused or failed on), ``payloads_lost``
    (not stored in the payload store), ``payloads_unencodable`` (not recorded at all), ``hook_errors``
    (a user hook such as ``redact`` raised), ``internal_errors`` (a recording step of tailcut's own
    failed; the agent went on). Other keys appear when they are not zero.
    """
    counts = dict.fromkeys(
        (
            "spans_exported",
            "spans_dropped",
            "spans_export_failed",
            "payloads_lost",
            "payloads_unencodable",
            "hook_errors",
            "internal_errors",
        ),
        0,
    )
    counts.update(_config.counters.snapshot())
    return counts
