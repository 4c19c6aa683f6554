"""The two tools every framework agent gets, as plain functions each framework wraps its own way.

``get_weather`` always works. ``lookup_order`` fails by its argument, so a scenario chooses the failure:
an ``order_id`` ending in ``boom`` raises :class:`OrderServiceError`; ``A-429``, ``A-403`` and ``A-404``
return the text an HTTP client library would hand back for that status. Every execution is counted in
:data:`EXECUTIONS`, so a replay test can prove that a served tool never ran.
"""

from __future__ import annotations

import json
from collections import Counter

#: Executions per tool name in this process.
EXECUTIONS: Counter[str] = Counter()

WEATHER = {"Paris": {"sky": "sunny", "celsius": 21}, "Oslo": {"sky": "snow", "celsius": -4}}

#: ``order_id`` -> the error text the order service's HTTP client returned.
HTTP_ERRORS = {
    "A-429": "HTTP 429 Too Many Requests: rate limit exceeded for the orders API; retry after 30 seconds",
    "A-403": "Error 403: Forbidden. The API key does not grant access to orders",
    "A-404": "404 Client Error: Not Found for order A-404",
}

WEATHER_DOC = "Current weather of a city: sky and temperature in Celsius."
ORDER_DOC = "Status of a customer order, by its id (such as A-17)."


class OrderServiceError(RuntimeError):
    """The order service failed (what a tool that raises raises)."""


def get_weather(city: str) -> str:
    """The weather of ``city`` as JSON text."""
    EXECUTIONS["get_weather"] += 1
    return json.dumps({"city": city, **WEATHER.get(city, {"sky": "unknown"})})


def lookup_order(order_id: str) -> str:
    """The status of order ``order_id`` as JSON text, or an HTTP error text, or it raises."""
    EXECUTIONS["lookup_order"] += 1
    if order_id.endswith("boom"):
        raise OrderServiceError(f"order service crashed looking up {order_id}: connection reset by peer")
    if order_id in HTTP_ERRORS:
        return HTTP_ERRORS[order_id]
    return json.dumps({"order_id": order_id, "status": "shipped"})
