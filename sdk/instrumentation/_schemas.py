"""Tool-call schema violations: a model's tool call whose arguments break the schema it was sent.

A violation is a signal the collector samples on (``tailcut.trace.schema_violations``), so it is counted
by the rules the tool itself would apply: arguments that are not JSON, or that fail the JSON Schema of
the tool definition in the same request. Compiled validators are cached by the schema's hash, since an
agent sends the same few tool definitions on every call. ``jsonschema`` is imported on first use.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from tailcut import _config
from tailcut.canonical import canonical_json, sha256_hex

#: Compiled validators kept (the oldest is dropped first); far more than one agent's tool schemas.
_CACHE_LIMIT = 512
_validators: dict[str, Any] = {}
_MISSING = object()
_lock = threading.Lock()


def count_violations(schemas: Mapping[str, Any], calls: Iterable[tuple[str, Any]]) -> int:
    """Count the tool calls whose arguments are not JSON or fail their tool's schema.

    Parameters
    ----------
    schemas
        Tool name to the JSON Schema of its arguments, as sent in the request.
    calls
        ``(tool name, arguments)`` for each tool call of the response; arguments are the JSON text the
        model wrote (OpenAI) or the decoded object (Anthropic). Empty text counts as ``{}``.

    Returns
    -------
    int
        Calls that break their schema. Calls to a tool that was sent without a schema (or not at all)
        are not counted: there is nothing to check them against.
    """
    count = 0
    for name, arguments in calls:
        schema = schemas.get(name)
        if not isinstance(schema, Mapping):
            continue
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                count += 1
                continue
        validator = _validator(schema)
        if validator is not None and not validator.is_valid(arguments):
            count += 1
    return count


def _validator(schema: Mapping[str, Any]) -> Any:
    """The compiled validator of ``schema``; None (logged once) when the schema itself is invalid."""
    key = sha256_hex(canonical_json(schema))
    validator = _validators.get(key, _MISSING)
    if validator is not _MISSING:
        return validator
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        _config.counters.warn_once(
            f"schema:{key}", "tailcut: a tool schema is not valid JSON Schema; not checked: %s", exc.message
        )
        validator = None
    else:
        validator = cls(schema)
    with _lock:
        if len(_validators) >= _CACHE_LIMIT:
            del _validators[next(iter(_validators))]
        _validators[key] = validator
    return validator
