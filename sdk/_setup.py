"""``tailcut.init()``: connect the SDK to an OpenTelemetry pipeline, once per process."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from tailcut import _config, environment
from tailcut._foreign import DeferredTracer, count_exports
from tailcut._otlp import OtlpSettings, Protocol, env_endpoint, exporter_factory
from tailcut._processor import RecordingSpanProcessor
from tailcut._threads import thread_context
from tailcut._version import __version__
from tailcut.errors import ConfigError
from tailcut.payloads import PayloadStore

_logger = logging.getLogger("tailcut")

_init_lock = threading.Lock()
_processor: RecordingSpanProcessor | None = None
_provider: TracerProvider | None = None
_fork_hook_registered = False


def init(
    service_name: str | None = None,
    endpoint: str | None = None,
    *,
    protocol: Protocol | None = None,
    headers: Mapping[str, str] | None = None,
    bearer_token: str | None = None,
    certificate_file: str | None = None,
    client_certificate_file: str | None = None,
    client_key_file: str | None = None,
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
    shutdown_timeout: float | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    propagate_context_to_threads: bool = True,
    self_contained: bool | None = None,
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
        Extra headers for the exporter, sent with those of ``OTEL_EXPORTER_OTLP_HEADERS``.
    bearer_token
        Sent as ``authorization: Bearer <token>`` (the collector's ``bearertokenauth``); without it,
        an ``authorization`` entry of ``OTEL_EXPORTER_OTLP_HEADERS`` is sent.
    certificate_file
        CA certificate (PEM) the collector's TLS certificate is checked against, for an ``https://``
        endpoint (``OTEL_EXPORTER_OTLP_CERTIFICATE``; default: the system's CAs).
    client_certificate_file, client_key_file
        Client certificate and key (PEM) for mutual TLS (``OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE``,
        ``OTEL_EXPORTER_OTLP_CLIENT_KEY``).
    exporter
        Any ``SpanExporter`` to use instead of OTLP, e.g. ``tailcut.exporters.ParquetSpanExporter``.
    tracer_provider
        Add tailcut to this provider. By default an application that already set an SDK
        ``TracerProvider`` keeps it, and tailcut adds its exporter only when an endpoint or exporter is
        given (without one, :func:`stats` counts what the provider's own exporters send); otherwise
        tailcut creates and registers one.
    auto_instrument
        Also instrument the ``openai`` and ``anthropic`` SDKs and the agent frameworks (LangChain/LangGraph,
        the OpenAI Agents SDK, smolagents, LlamaIndex) that are installed.
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
        Spans buffered while the exporter catches up (``TAILCUT_MAX_QUEUE_SIZE``, then
        ``OTEL_BSP_MAX_QUEUE_SIZE``, default 65536); the other ``OTEL_BSP_*`` variables apply too.
    shutdown_timeout
        Seconds the exit (``tailcut.shutdown()``) waits for queued spans to be exported, e.g. while the
        collector is down; the spans still queued then are counted as lost and reported
        (``TAILCUT_SHUTDOWN_TIMEOUT``, default 3).
    resource_attributes
        Extra resource attributes (``OTEL_RESOURCE_ATTRIBUTES`` is read as well).
    propagate_context_to_threads
        Make threads and thread pools inherit the caller's context, so their spans join the run.
    self_contained
        Record every LLM request whole on its span instead of as a skeleton plus the pieces (messages,
        tools, instructions) its trace has not carried yet (``TAILCUT_SELF_CONTAINED``, default off).
        Turn it on when the spans go straight to a backend that is not tailcut.

    Returns
    -------
    TracerProvider
        The provider tailcut records through.

    Raises
    ------
    ConfigError
        For an invalid argument (unknown protocol, missing certificate file, ...).

    Examples
    --------
    Usually ``tailcut.init(service_name="weather-agent", endpoint="http://127.0.0.1:4318")`` sends the
    spans to ``tailcut collect``; here an in-process exporter writes them into a data dir instead:

    >>> import tailcut
    >>> from tailcut.exporters import ParquetSpanExporter
    >>> provider = tailcut.init(service_name="weather-agent", exporter=ParquetSpanExporter("data"))
    >>> @tailcut.tool
    ... def lookup(city: str) -> str:
    ...     return "sunny"
    >>> with tailcut.run("weather", input={"city": "Paris"}) as run:
    ...     run.set_output(lookup("Paris"))
    >>> tailcut.shutdown()  # runs at exit by itself; here, to read the data dir now

    >>> from tailcut.analysis import Dataset
    >>> Dataset("data").sql("SELECT service_name, root_name, span_count, tool_calls FROM traces").rows()
    [('weather-agent', 'weather', 2, 1)]
    """
    global _processor, _provider
    with _init_lock:
        if _provider is not None:
            _logger.warning("tailcut.init() was already called; this call changes nothing")
            return _provider
        if inline_limit is not None and inline_limit < 1:
            raise ConfigError(f"inline_limit must be a positive number of bytes; got {inline_limit}")
        if max_queue_size is not None and max_queue_size < 1:
            raise ConfigError(f"max_queue_size must be a positive number of spans; got {max_queue_size}")
        if shutdown_timeout is not None and not 0 <= shutdown_timeout < float("inf"):
            raise ConfigError(f"shutdown_timeout must be a number of seconds >= 0; got {shutdown_timeout}")
        otlp = OtlpSettings(
            endpoint=endpoint,
            protocol=protocol,
            headers=headers,
            bearer_token=bearer_token,
            certificate_file=certificate_file,
            client_certificate_file=client_certificate_file,
            client_key_file=client_key_file,
        )

        provider, owned = _resolve_provider(tracer_provider, service_name, resource_attributes)
        rebuild: Callable[[], SpanExporter] | None = None
        if exporter is None and (owned or endpoint or env_endpoint()):
            rebuild = exporter_factory(otlp)
            exporter = rebuild()
        if exporter is not None:
            _processor = RecordingSpanProcessor(
                exporter,
                max_queue_size=max_queue_size,
                shutdown_timeout=shutdown_timeout,
                rebuild_exporter=rebuild,
            )
            provider.add_span_processor(_processor)
        else:  # the application's own pipeline exports: count what it does
            count_exports(provider)
        _provider = provider
        _flush_forked_children()
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
                self_contained=self_contained,
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
        provider = tracer_provider or trace.get_tracer_provider()
        tracer: trace.Tracer
        if isinstance(provider, TracerProvider):
            count_exports(provider)
            tracer = provider.get_tracer("tailcut", __version__)
        elif tracer_provider is None:  # still the proxy: count once the application sets its own
            tracer = DeferredTracer("tailcut", __version__)
        else:
            tracer = provider.get_tracer("tailcut", __version__)
        _config.install(_recording_config(tracer))
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
    self_contained: bool | None = None,
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
        self_contained=(
            self_contained
            if self_contained is not None
            else environment.get_bool(environment.TAILCUT_SELF_CONTAINED, False)
        ),
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


def _flush_forked_children() -> None:
    """Make a ``multiprocessing`` child forked after init export its spans when it exits.

    Such a child leaves through ``os._exit`` after ``multiprocessing``'s own exit handlers, so the
    ``atexit`` hook that flushes a normal process never runs there; a ``multiprocessing`` finalizer
    does. (Plain ``os.fork()`` children that end with ``sys.exit`` run ``atexit`` as usual.)
    """
    global _fork_hook_registered
    if _fork_hook_registered or not hasattr(os, "register_at_fork"):
        return
    _fork_hook_registered = True
    os.register_at_fork(after_in_child=_in_forked_child)


def _in_forked_child() -> None:
    # multiprocessing clears the finalizers it inherited, then runs its after-fork hooks: register
    # there, so the finalizer is the child's own.
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and _provider is not None:
        mp_util.register_after_fork(_provider, _register_exit_flush)


def _register_exit_flush(provider: TracerProvider) -> None:
    import multiprocessing.util

    multiprocessing.util.Finalize(None, shutdown, exitpriority=100)


def force_flush(timeout_millis: int = 30000) -> bool:
    """Export every span recorded so far; True when all went out in time."""
    provider = _provider
    if provider is None:
        return True
    return bool(provider.force_flush(timeout_millis))


def shutdown(timeout: float | None = None) -> None:
    """Flush and stop exporting (registered to run at exit, so a short-lived agent loses nothing).

    Waits ``timeout`` seconds at most, plus half a second for the exporter to give up (default:
    ``init(shutdown_timeout=)``, ``TAILCUT_SHUTDOWN_TIMEOUT``, 3), for the queued spans, e.g. when the
    collector is unreachable; the spans not exported by then are counted in
    ``tailcut.stats()["spans_dropped"]`` and one warning says how many were lost.
    """
    global _processor, _provider
    with _init_lock:
        processor, _processor = _processor, None
        provider, _provider = _provider, None
    if processor is not None:
        processor.shutdown(timeout)
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
