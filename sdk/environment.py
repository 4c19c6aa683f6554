"""Environment variables tailcut reads, each with its default: the one module that reads them.

Configuration follows one order everywhere: an explicit argument, then the environment variable, then the
documented default. A malformed value warns and falls back to the default; it never stops the agent.
The standard ``OTEL_*`` variables are read as the OpenTelemetry SDK documents them. Every ``TAILCUT_*``
variable is named here and read through the accessors below (``tests/test_environment.py`` fails if a
module elsewhere reads one from ``os.environ``); a command-line option that falls back to one names it
with click's ``envvar=`` and this module's constant.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from typing import Final, TypeVar

_logger = logging.getLogger("tailcut")
N = TypeVar("N", int, float)

#: The harness revision of the agent (default: the git commit of the working tree, if there is one).
TAILCUT_HARNESS_REVISION: Final = "TAILCUT_HARNESS_REVISION"
#: The revision of the environment the tools act on (default: unset).
TAILCUT_ENV_REVISION: Final = "TAILCUT_ENV_REVISION"
#: Directory of the content-addressed payload store (default: ``.tailcut/payloads`` in the working dir).
TAILCUT_PAYLOAD_DIR: Final = "TAILCUT_PAYLOAD_DIR"
#: Inline limit per payload attribute, in bytes (default: 65536).
TAILCUT_INLINE_LIMIT: Final = "TAILCUT_INLINE_LIMIT"
#: Send every span self-contained (whole requests, no pieces), for a backend that is not tailcut.
TAILCUT_SELF_CONTAINED: Final = "TAILCUT_SELF_CONTAINED"
#: ``false`` switches content capture off for every kind (default: ``true``).
TAILCUT_CAPTURE_CONTENT: Final = "TAILCUT_CAPTURE_CONTENT"
#: Span queue capacity of tailcut's batch processor (default: ``OTEL_BSP_MAX_QUEUE_SIZE``, else 65536).
TAILCUT_MAX_QUEUE_SIZE: Final = "TAILCUT_MAX_QUEUE_SIZE"
#: Seconds ``tailcut.shutdown()`` (run at exit) waits for queued spans to be exported; what is still
#: queued then is counted as lost (default: 3).
TAILCUT_SHUTDOWN_TIMEOUT: Final = "TAILCUT_SHUTDOWN_TIMEOUT"
#: A pricing file whose entries replace or add to the packaged prices (default: the packaged prices only).
TAILCUT_PRICING: Final = "TAILCUT_PRICING"
#: The token ``tailcut ui`` requires of every request (default: none; ``--token`` wins).
TAILCUT_UI_TOKEN: Final = "TAILCUT_UI_TOKEN"
#: The OpenAI-compatible endpoint the demo fleet's agents call (default: the demo's own model server).
TAILCUT_DEMO_MODEL_URL: Final = "TAILCUT_DEMO_MODEL_URL"
#: Largest OTLP export request, in encoded bytes: batches are split and larger spans carried in pieces
#: (default: 3 MiB over gRPC, 16 MiB over HTTP, below the OpenTelemetry Collector's receive limits;
#: at least 4096).
TAILCUT_MAX_EXPORT_BYTES: Final = "TAILCUT_MAX_EXPORT_BYTES"

# Standard OpenTelemetry variables tailcut honours when arguments are absent.
OTEL_SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
OTEL_EXPORTER_OTLP_HEADERS: Final = "OTEL_EXPORTER_OTLP_HEADERS"
OTEL_EXPORTER_OTLP_TRACES_HEADERS: Final = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
OTEL_BSP_MAX_QUEUE_SIZE: Final = "OTEL_BSP_MAX_QUEUE_SIZE"
OTEL_BSP_MAX_EXPORT_BATCH_SIZE: Final = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
OTEL_BSP_SCHEDULE_DELAY: Final = "OTEL_BSP_SCHEDULE_DELAY"
OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: Final = "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"
OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT: Final = "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"

DEFAULT_INLINE_LIMIT: Final = 64 * 1024
DEFAULT_MAX_QUEUE_SIZE: Final = 65536
#: Spans per export call, and the longest a span waits for its batch (OpenTelemetry's default: 5000 ms).
DEFAULT_MAX_EXPORT_BATCH_SIZE: Final = 512
DEFAULT_SCHEDULE_DELAY_MILLIS: Final = 500
DEFAULT_SHUTDOWN_TIMEOUT: Final = 3.0
DEFAULT_PAYLOAD_DIR: Final = os.path.join(".tailcut", "payloads")


def get_str(name: str) -> str | None:
    """The variable's value, or None when unset or blank."""
    value = os.environ.get(name, "").strip()
    return value or None


def get_int(name: str, default: int, *, minimum: int = 1) -> int:
    """The variable as an integer ≥ ``minimum``; a malformed value warns and gives ``default``."""
    return _get_number(name, default, int, lambda value: value >= minimum, f"an integer >= {minimum}")


def get_float(name: str, default: float) -> float:
    """The variable as a finite number ≥ 0; a malformed value warns and gives ``default``."""
    return _get_number(name, default, float, lambda value: 0 <= value < math.inf, "a number >= 0")


def _get_number(
    name: str, default: N, parse: Callable[[str], N], valid: Callable[[N], bool], expected: str
) -> N:
    raw = get_str(name)
    if raw is None:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not valid(value):
        _logger.warning("tailcut: ignoring %s=%r (expected %s); using %s", name, raw, expected, default)
        return default
    return value


def get_bool(name: str, default: bool) -> bool:
    """The variable as a boolean (true/false/1/0/yes/no/on/off); a malformed value warns."""
    raw = get_str(name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    _logger.warning("tailcut: ignoring %s=%r (expected true or false); using %s", name, raw, default)
    return default


def pricing_file() -> str | None:
    """The user pricing file named by :data:`TAILCUT_PRICING`, or None for the packaged prices only."""
    return get_str(TAILCUT_PRICING)


def demo_model_url(default: str) -> str:
    """The model endpoint of the demo's agents: :data:`TAILCUT_DEMO_MODEL_URL`, else ``default``."""
    return get_str(TAILCUT_DEMO_MODEL_URL) or default
