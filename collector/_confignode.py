"""Typed reads from a parsed YAML tree that fail with the key path and what is allowed.

Every error the config can produce is one line of the form
``processors.tail_sampling.policies[2].latency.threshold_ms: expected a positive integer, got "fast"``,
so each component (receivers, policies, exporters) validates its own block with these reads instead of
hand-writing messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NoReturn

from tailcut.collector._durations import DURATION_FORMS, parse_duration
from tailcut.errors import ConfigError


def describe(value: Any) -> str:
    """A short rendering of a YAML value for an error message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _bound_phrase(minimum: float | None, *, integer: bool) -> str:
    noun = "integer" if integer else "number"
    if minimum is None:
        return f"an {noun}" if integer else f"a {noun}"
    if minimum == 1 and integer:
        return "a positive integer"
    if minimum == 0:
        return f"a non-negative {noun}"
    return f"{'an' if integer else 'a'} {noun} >= {minimum:g}"


class Node:
    """One value of the config tree and the key path that leads to it.

    Parameters
    ----------
    value
        The value as ``yaml.safe_load`` produced it.
    path
        Its key path, e.g. ``processors.tail_sampling.policies[2]`` (empty for the document root).
    """

    __slots__ = ("path", "value")

    def __init__(self, value: Any, path: str = "") -> None:
        self.value = value
        self.path = path

    def child_path(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def fail(self, expected: str) -> NoReturn:
        """Raise the standard one-line error for this value."""
        raise ConfigError(f"{self.path or 'config'}: expected {expected}, got {describe(self.value)}")

    def error(self, message: str) -> NoReturn:
        """Raise a one-line error about this value with a free-form explanation."""
        raise ConfigError(f"{self.path or 'config'}: {message}")

    def mapping(self, allowed: Iterable[str], *, required: Iterable[str] = ()) -> dict[str, Node]:
        """The value as a mapping whose keys are all in ``allowed`` (an empty value is an empty mapping)."""
        value = {} if self.value is None else self.value
        if not isinstance(value, dict):
            self.fail("a mapping")
        allowed_keys = list(allowed)
        for key in value:
            if not isinstance(key, str) or key not in allowed_keys:
                listing = ", ".join(allowed_keys) if allowed_keys else "no keys"
                raise ConfigError(f"{self.child_path(str(key))}: unknown key; allowed: {listing}")
        for key in required:
            if key not in value:
                raise ConfigError(f"{self.child_path(key)}: required key is missing")
        return {key: Node(item, self.child_path(key)) for key, item in value.items()}

    def items(self) -> list[Node]:
        """The value as a list (an empty value is an empty list)."""
        value = [] if self.value is None else self.value
        if not isinstance(value, list):
            self.fail("a list")
        return [Node(item, self.child_path(index)) for index, item in enumerate(value)]

    def as_str(self, *, allow_empty: bool = False) -> str:
        if not isinstance(self.value, str) or (not allow_empty and not self.value.strip()):
            self.fail("a string" if allow_empty else "a non-empty string")
        return self.value

    def as_choice(self, choices: Iterable[str]) -> str:
        options = list(choices)
        if not isinstance(self.value, str) or self.value not in options:
            self.fail("one of " + ", ".join(options))
        return self.value

    def as_bool(self) -> bool:
        if not isinstance(self.value, bool):
            self.fail("true or false")
        return self.value

    def as_int(self, *, minimum: int | None = None) -> int:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            self.fail(_bound_phrase(minimum, integer=True))
        return value

    def as_number(self, *, minimum: float | None = None, maximum: float | None = None) -> float:
        value = self.value
        bad = isinstance(value, bool) or not isinstance(value, int | float) or value != value  # NaN
        if not bad and (
            (minimum is not None and value < minimum) or (maximum is not None and value > maximum)
        ):
            bad = True
        if bad:
            if minimum is not None and maximum is not None:
                self.fail(f"a number from {minimum:g} to {maximum:g}")
            self.fail(_bound_phrase(minimum, integer=False))
        return float(value)

    def as_duration(self, *, positive: bool = False) -> float:
        """Seconds in a Collector-style duration (``10s``, ``500ms``, ``1m``)."""
        expected = DURATION_FORMS if not positive else f"a positive duration ({DURATION_FORMS})"
        if not isinstance(self.value, str):
            self.fail(expected)
        try:
            seconds = parse_duration(self.value)
        except ValueError:
            self.fail(expected)
        if seconds < 0 or (positive and seconds == 0):
            self.fail(expected)
        return seconds

    def as_str_list(self, *, allow_empty_list: bool = False) -> list[str]:
        items = self.items()
        if not items and not allow_empty_list:
            self.fail("a non-empty list of strings")
        return [item.as_str() for item in items]

    def as_str_mapping(self) -> dict[str, str]:
        """A mapping of string keys to string values (e.g. HTTP headers)."""
        value = {} if self.value is None else self.value
        if not isinstance(value, dict):
            self.fail("a mapping of names to strings")
        return {
            str(key): Node(item, self.child_path(str(key))).as_str(allow_empty=True)
            for key, item in value.items()
        }

    def as_endpoint(self) -> tuple[str, int]:
        """A ``HOST:PORT`` endpoint (port 0 picks a free port)."""
        return parse_endpoint(self.as_str(), self)


def parse_endpoint(text: str, node: Node | None = None) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``; ``[::1]:4318`` is accepted for IPv6 hosts.

    Raises
    ------
    ConfigError
        Naming ``node``'s key path when given, else the text itself.
    """
    host, sep, port_text = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        expected = "HOST:PORT, e.g. 127.0.0.1:4318"
        if node is not None:
            node.fail(expected)
        raise ConfigError(f"{text!r}: expected {expected}")
    return host, int(port_text)
