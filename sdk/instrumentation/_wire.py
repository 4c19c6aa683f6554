"""A call's request and response as they crossed the wire, in the form tailcut records.

The request is the body the SDK was handed plus what it merges in (``extra_body`` at the top level,
``extra_headers`` and ``extra_query`` under their own keys), with the SDK's "not given" sentinels left
out and pydantic models dumped as the SDK dumps them. The client, timeouts and retry settings are not
part of it: they do not change what the model is asked. An HTTP error is recorded as its status, body
and retry headers, which is all a replay needs to make the SDK raise the same exception again.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, MappingView, Set
from typing import Any

from tailcut.canonical import loads

#: Headers kept in the record of an HTTP error: what the SDK reads to decide on retries, and the ids.
ERROR_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry", "x-request-id", "request-id")
#: Header prefix of the SDKs' own bookkeeping (helper name, raw-response mode): not part of the request.
_SDK_HEADER_PREFIX = "x-stainless-"


#: Types checked first, by identity: a transcript is mostly strings (``isinstance`` against the
#: ``collections.abc`` classes costs far more than the rest of the walk), and a message is mostly a
#: flat dict of them, which is checked in one set operation.
_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})


def _flat(value: dict[Any, Any]) -> bool:
    """Whether ``value`` has string keys and only scalar values."""
    return _SCALARS.issuperset(map(type, value.values())) and _STR.issuperset(map(type, value))


def freeze_iterators(value: Any) -> Any:
    """``value`` with every one-shot iterator (a generator of messages, say) replaced by a list.

    Recording reads the request before the SDK sends it, so an iterator must be read once and the list
    handed on. Containers are copied only where something inside them changed.
    """
    kind = type(value)
    if kind in _SCALARS or (kind is dict and _SCALARS.issuperset(map(type, value.values()))):
        return value
    if isinstance(value, dict):
        changed: dict[Any, Any] | None = None
        for key, item in value.items():
            if type(item) in _SCALARS:
                continue
            frozen = freeze_iterators(item)
            if frozen is not item:
                changed = changed if changed is not None else dict(value)
                changed[key] = frozen
        return value if changed is None else changed
    if isinstance(value, list | tuple):
        items = [item if type(item) in _SCALARS else freeze_iterators(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, Iterator) and not isinstance(value, io.IOBase):
        return [freeze_iterators(item) for item in value]
    return value


def plain(value: Any, sentinels: tuple[type, ...]) -> Any:
    """``value`` as JSON-ready data, as the SDK would send it: sentinels dropped, models dumped."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict and _flat(value):
        return dict(value)
    if isinstance(value, Mapping):
        return {
            str(key): item if type(item) in _SCALARS else plain(item, sentinels)
            for key, item in value.items()
            if not isinstance(item, sentinels)
        }
    if isinstance(value, list | tuple | Set | MappingView):
        return [item if type(item) in _SCALARS else plain(item, sentinels) for item in value]
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        dumped = model_dump(
            mode="json",
            exclude_unset=True,
            by_alias=True,
            exclude=getattr(value, "__api_exclude__", None),
            warnings=False,
        )
        return plain(dumped, sentinels)
    return value


def sent_request(body: Any, options: Mapping[str, Any], sentinels: tuple[type, ...]) -> dict[str, Any]:
    """The request of one call: the body the SDK sends (``extra_body`` merged) and the extras it adds.

    Parameters
    ----------
    body
        The ``body`` the resource method handed to the client's ``post``.
    options
        Its request options (``headers``, ``params``, ``extra_json``, ``timeout``, ...).
    sentinels
        The SDK's "not given" types, whose values are never sent.
    """
    request = plain(body, sentinels) if isinstance(body, Mapping) else {"body": plain(body, sentinels)}
    extra_body = options.get("extra_json")
    if isinstance(extra_body, Mapping):
        request.update(plain(extra_body, sentinels))
    headers = options.get("headers")
    if isinstance(headers, Mapping):
        sent_headers = {
            str(name): value
            for name, value in headers.items()
            if not isinstance(value, sentinels) and not str(name).lower().startswith(_SDK_HEADER_PREFIX)
        }
        if sent_headers:
            request["extra_headers"] = sent_headers
    query = options.get("params")
    if isinstance(query, Mapping) and query:
        request["extra_query"] = plain(query, sentinels)
    return request


def response_body(result: Any) -> Any:
    """The provider's response body behind what a non-streaming call returned.

    ``with_raw_response`` calls return the HTTP response itself: its body is used as received.
    Otherwise the SDK's response model is dumped with only the fields the provider sent, values the
    model's types do not expect (a tool input that is not an object) as they are, without a warning.

    Raises
    ------
    TypeError
        If ``result`` is neither (the caller logs it and returns the result unrecorded).
    """
    http_response = getattr(result, "http_response", None)
    if http_response is not None:
        return loads(http_response.content)
    model_dump = getattr(result, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json", exclude_unset=True, warnings=False)
    raise TypeError(f"unexpected response type {type(result).__module__}.{type(result).__qualname__}")


def status_error_record(exc: BaseException) -> dict[str, Any] | None:
    """``{"status_code", "body", "headers"}`` of an SDK exception for an HTTP error status, else None."""
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if not isinstance(status, int) or response is None:
        return None
    try:
        body: Any = loads(response.content)
    except ValueError:
        body = response.text
    headers = {name: response.headers[name] for name in ERROR_HEADERS if name in response.headers}
    return {"status_code": status, "body": body, "headers": headers}


def is_status_record(value: Any) -> bool:
    """Whether ``value`` is a recorded HTTP error (see :func:`status_error_record`)."""
    return isinstance(value, Mapping) and isinstance(value.get("status_code"), int)
