"""The leaf sampling policies of the Collector's ``tail_sampling`` processor, with its keys and semantics.

Each class reads its own config block (so the keys of a policy are defined once, next to its logic),
names the attribute keys it needs extracted from spans, and answers one :class:`Vote` per trace.
Semantics follow ``processor/tailsamplingprocessor/internal/sampling`` in opentelemetry-collector-contrib:
attribute policies match when *any* resource or span carries a matching value; ``invert_match`` samples
when *none* does (tailcut gives the plain sampled/not-sampled answer, the Collector's behaviour under its
``disableinvertdecisions`` feature gate, since the older "inverted" decisions are deprecated there).
tailcut extensions are marked where they appear.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from tailcut.collector._confignode import Node
from tailcut.collector._hash import TraceIdSampler
from tailcut.collector._ratewindow import AcceptanceWindow
from tailcut.collector._votes import (
    NOT_SAMPLED_FOR_SURE,
    SAMPLED_FOR_SURE,
    Decision,
    TraceView,
    Vote,
    certain,
)

_STATUS_CODES = {"UNSET": 0, "OK": 1, "ERROR": 2}
_NUMBERS = (int, float)  # exact types: a bool is not a number here


class Policy(ABC):
    """One named policy: a decision method, a description and the attribute keys it reads."""

    type_name: ClassVar[str]
    #: The keys of this policy's config block (the block under its type name).
    config_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    @abstractmethod
    def from_config(cls, name: str, block: Node) -> Policy:
        """Build the policy from its block (``policies[i].<type>``), failing with the key path."""

    @abstractmethod
    def evaluate(self, trace: TraceView, now: float) -> Vote:
        """The policy's vote on ``trace`` at ``now`` (seconds; only rate limits read the clock)."""

    def estimate(self, trace: TraceView, now: float) -> float:
        """P(a positive vote) for ``trace`` without changing any state.

        Combinators call it for sub-policies they skip (as the Collector stops at the first failing
        ``and`` member), so a skipped rate limit does not spend budget. Stateless policies just
        evaluate; stateful ones override it.
        """
        return self.evaluate(trace, now).probability

    def attribute_keys(self) -> frozenset[str]:
        """Span/resource attribute keys whose values this policy needs in :attr:`TraceView.values`."""
        return frozenset()

    @property
    @abstractmethod
    def description(self) -> str:
        """A one-line summary for ``tailcut collect --check``."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {self.description}>"


class AlwaysSample(Policy):
    type_name = "always_sample"

    @classmethod
    def from_config(cls, name: str, block: Node) -> AlwaysSample:
        block.mapping(())
        return cls(name)

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        return SAMPLED_FOR_SURE

    @property
    def description(self) -> str:
        return "every trace"


class Latency(Policy):
    """Trace duration (earliest start to latest end) above ``threshold_ms``, up to ``upper_threshold_ms``.

    As in the Collector since v0.157, ``threshold_ms`` is an exclusive lower bound; with an upper bound
    the range is ``threshold_ms < duration <= upper_threshold_ms``.
    """

    type_name = "latency"
    config_keys = ("threshold_ms", "upper_threshold_ms")

    def __init__(self, name: str, threshold_ms: int, upper_threshold_ms: int = 0) -> None:
        super().__init__(name)
        self.threshold_ms = threshold_ms
        self.upper_threshold_ms = upper_threshold_ms

    @classmethod
    def from_config(cls, name: str, block: Node) -> Latency:
        keys = block.mapping(cls.config_keys, required=("threshold_ms",))
        threshold = keys["threshold_ms"].as_int(minimum=1)
        upper = keys["upper_threshold_ms"].as_int(minimum=0) if "upper_threshold_ms" in keys else 0
        if upper and upper <= threshold:
            keys["upper_threshold_ms"].fail(f"an integer above threshold_ms ({threshold}) or 0 for no bound")
        return cls(name, threshold, upper)

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        duration = trace.duration_ms
        if self.upper_threshold_ms == 0:
            return SAMPLED_FOR_SURE if duration > self.threshold_ms else NOT_SAMPLED_FOR_SURE
        return certain(self.threshold_ms < duration <= self.upper_threshold_ms)

    @property
    def description(self) -> str:
        upper = f" and <= {self.upper_threshold_ms} ms" if self.upper_threshold_ms else ""
        return f"duration > {self.threshold_ms} ms{upper}"


class StatusCode(Policy):
    """Any span whose status is one of ``status_codes`` (``OK``, ``ERROR``, ``UNSET``)."""

    type_name = "status_code"
    config_keys = ("status_codes",)

    def __init__(self, name: str, status_codes: list[str]) -> None:
        super().__init__(name)
        self.status_names = status_codes
        self.mask = sum(1 << code for code in {_STATUS_CODES[name] for name in status_codes})

    @classmethod
    def from_config(cls, name: str, block: Node) -> StatusCode:
        keys = block.mapping(cls.config_keys, required=cls.config_keys)
        items = keys["status_codes"].items()
        if not items:
            keys["status_codes"].fail("a non-empty list of OK, ERROR, UNSET")
        return cls(name, [item.as_choice(_STATUS_CODES) for item in items])

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        return SAMPLED_FOR_SURE if self.mask & trace.status_mask else NOT_SAMPLED_FOR_SURE

    @property
    def description(self) -> str:
        return "a span with status " + " or ".join(self.status_names)


class _AttributePolicy(Policy):
    """Shared logic of the attribute policies: any value matches, or with ``invert_match`` none does."""

    def __init__(self, name: str, key: str, invert_match: bool) -> None:
        super().__init__(name)
        self.key = key
        self.invert_match = invert_match
        self._found, self._absent = certain(not invert_match), certain(invert_match)

    def attribute_keys(self) -> frozenset[str]:
        return frozenset((self.key,))

    @abstractmethod
    def matches(self, value: Any) -> bool:
        """Whether one attribute value satisfies the policy."""

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        values = trace.values.get(self.key)
        if values:
            matches = self.matches
            for value in values:
                if matches(value):
                    return self._found
        return self._absent

    def _describe(self, condition: str) -> str:
        return f"no {self.key} {condition}" if self.invert_match else f"{self.key} {condition}"


class NumericAttribute(_AttributePolicy):
    """A numeric attribute within ``[min_value, max_value]`` (either bound may be omitted).

    tailcut extension: bounds may be decimal numbers and ``double`` attributes compare as numbers (the
    Collector takes integer bounds and reads a double attribute as 0), so ``anomaly_score >= 3.5``
    can be written.
    """

    type_name = "numeric_attribute"
    config_keys = ("key", "min_value", "max_value", "invert_match")

    def __init__(
        self,
        name: str,
        key: str,
        min_value: float | None = None,
        max_value: float | None = None,
        invert_match: bool = False,
    ) -> None:
        super().__init__(name, key, invert_match)
        self.min_value = float("-inf") if min_value is None else min_value
        self.max_value = float("inf") if max_value is None else max_value

    @classmethod
    def from_config(cls, name: str, block: Node) -> NumericAttribute:
        keys = block.mapping(cls.config_keys, required=("key",))
        if "min_value" not in keys and "max_value" not in keys:
            block.error("set min_value, max_value or both")
        low = _number(keys["min_value"]) if "min_value" in keys else None
        high = _number(keys["max_value"]) if "max_value" in keys else None
        if low is not None and high is not None and low > high:
            keys["max_value"].fail(f"a number >= min_value ({low:g})")
        invert = keys["invert_match"].as_bool() if "invert_match" in keys else False
        return cls(name, keys["key"].as_str(), low, high, invert)

    def matches(self, value: Any) -> bool:
        return type(value) in _NUMBERS and self.min_value <= value <= self.max_value

    @property
    def description(self) -> str:
        low = "" if self.min_value == float("-inf") else f">= {self.min_value:g}"
        high = "" if self.max_value == float("inf") else f"<= {self.max_value:g}"
        return self._describe(" and ".join(part for part in (low, high) if part))


def _number(node: Node) -> int | float:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        node.fail("a number")
    return value


class StringAttribute(_AttributePolicy):
    """A string attribute equal to one of ``values``, or matching one as a regex.

    With ``enabled_regex_matching`` each value is a regular expression searched in the attribute (Go's
    ``MatchString``: unanchored, so write ``^...$`` to match the whole value). Empty span values never
    match. Results are cached per distinct attribute value, up to ``cache_max_size`` entries.
    """

    type_name = "string_attribute"
    config_keys = ("key", "values", "enabled_regex_matching", "cache_max_size", "invert_match")

    def __init__(
        self,
        name: str,
        key: str,
        values: list[str],
        *,
        regex: bool = False,
        cache_max_size: int = 128,
        invert_match: bool = False,
    ) -> None:
        super().__init__(name, key, invert_match)
        self.values = values
        self.regex = regex
        self._exact = frozenset(value for value in values if value)
        self._patterns = [re.compile(value) for value in values] if regex else []
        self._cache: dict[str, bool] = {}
        self._cache_max_size = cache_max_size

    @classmethod
    def from_config(cls, name: str, block: Node) -> StringAttribute:
        keys = block.mapping(cls.config_keys, required=("key", "values"))
        regex = keys["enabled_regex_matching"].as_bool() if "enabled_regex_matching" in keys else False
        value_nodes = keys["values"].items()
        if not value_nodes:
            keys["values"].fail("a non-empty list of strings")
        values = [node.as_str(allow_empty=True) for node in value_nodes]
        if regex:
            for node, value in zip(value_nodes, values, strict=True):
                try:
                    re.compile(value)
                except re.error as exc:
                    node.fail(f"a valid regular expression ({exc})")
        cache = keys["cache_max_size"].as_int(minimum=1) if "cache_max_size" in keys else 128
        invert = keys["invert_match"].as_bool() if "invert_match" in keys else False
        return cls(name, keys["key"].as_str(), values, regex=regex, cache_max_size=cache, invert_match=invert)

    def matches(self, value: Any) -> bool:
        if type(value) is not str or not value:
            return False
        if not self.regex:
            return value in self._exact
        cached = self._cache.get(value)
        if cached is None:
            cached = any(pattern.search(value) for pattern in self._patterns)
            if len(self._cache) >= self._cache_max_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[value] = cached
        return cached

    @property
    def description(self) -> str:
        how = "matching" if self.regex else "in"
        return self._describe(f"{how} [{', '.join(self.values)}]")


class BooleanAttribute(_AttributePolicy):
    """A boolean attribute equal to ``value``."""

    type_name = "boolean_attribute"
    config_keys = ("key", "value", "invert_match")

    def __init__(self, name: str, key: str, value: bool, invert_match: bool = False) -> None:
        super().__init__(name, key, invert_match)
        self.value = value

    @classmethod
    def from_config(cls, name: str, block: Node) -> BooleanAttribute:
        keys = block.mapping(cls.config_keys, required=("key", "value"))
        invert = keys["invert_match"].as_bool() if "invert_match" in keys else False
        return cls(name, keys["key"].as_str(), keys["value"].as_bool(), invert)

    def matches(self, value: Any) -> bool:
        return value is self.value

    @property
    def description(self) -> str:
        return self._describe(f"== {str(self.value).lower()}")


class SpanCount(Policy):
    """At least ``min_spans`` spans and, when ``max_spans`` is set (non-zero), at most that many."""

    type_name = "span_count"
    config_keys = ("min_spans", "max_spans")

    def __init__(self, name: str, min_spans: int, max_spans: int = 0) -> None:
        super().__init__(name)
        self.min_spans = min_spans
        self.max_spans = max_spans

    @classmethod
    def from_config(cls, name: str, block: Node) -> SpanCount:
        keys = block.mapping(cls.config_keys, required=("min_spans",))
        low = keys["min_spans"].as_int(minimum=0)
        high = keys["max_spans"].as_int(minimum=0) if "max_spans" in keys else 0
        if high and high < low:
            keys["max_spans"].fail(f"an integer >= min_spans ({low}) or 0 for no bound")
        return cls(name, low, high)

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        count = trace.span_count
        return certain(count >= self.min_spans and (self.max_spans == 0 or count <= self.max_spans))

    @property
    def description(self) -> str:
        return f"{self.min_spans} to {self.max_spans or 'any number of'} spans"


class Probabilistic(Policy):
    """The uniform slice: a trace is sampled when the Collector's salted trace-id hash is under p.

    Its vote does not depend on anything but the trace id, so the traces it keeps are a uniform sample
    of all traffic (the *baseline*). ``probability`` is ``sampling_percentage / 100``.
    """

    type_name = "probabilistic"
    config_keys = ("hash_salt", "sampling_percentage")

    def __init__(self, name: str, sampling_percentage: float, hash_salt: str = "") -> None:
        super().__init__(name)
        self.sampling_percentage = sampling_percentage
        self.sampler = TraceIdSampler(sampling_percentage, hash_salt)
        self._sampled = Vote(Decision.SAMPLED, self.sampler.ratio)
        self._not_sampled = Vote(Decision.NOT_SAMPLED, self.sampler.ratio)

    @classmethod
    def from_config(cls, name: str, block: Node) -> Probabilistic:
        keys = block.mapping(cls.config_keys, required=("sampling_percentage",))
        percentage = keys["sampling_percentage"].as_number(minimum=0, maximum=100)
        salt = keys["hash_salt"].as_str(allow_empty=True) if "hash_salt" in keys else ""
        return cls(name, percentage, salt)

    @property
    def salt(self) -> str:
        return self.sampler.salt

    @property
    def ratio(self) -> float:
        return self.sampler.ratio

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        return self._sampled if self.sampler.sampled(trace.trace_id) else self._not_sampled

    @property
    def description(self) -> str:
        return f"{self.sampling_percentage:g}% of trace ids (salt {self.sampler.salt!r})"


class RateLimiting(Policy):
    """Sample while the spans sampled in the current second stay under ``spans_per_second``.

    As in the Collector, a trace is sampled when the second's count plus its span count is strictly
    below the limit. ``probability`` is the kept/seen ratio of the last 10 seconds.
    """

    type_name = "rate_limiting"
    config_keys = ("spans_per_second",)

    def __init__(self, name: str, spans_per_second: int) -> None:
        super().__init__(name)
        self.spans_per_second = spans_per_second
        self._second = -1
        self._spans_in_second = 0
        self._window = AcceptanceWindow()

    @classmethod
    def from_config(cls, name: str, block: Node) -> RateLimiting:
        keys = block.mapping(cls.config_keys, required=cls.config_keys)
        return cls(name, keys["spans_per_second"].as_int(minimum=1))

    def evaluate(self, trace: TraceView, now: float) -> Vote:
        second = int(now)
        if second != self._second:
            self._second = second
            self._spans_in_second = 0
        if_sampled = self._spans_in_second + trace.span_count
        sampled = if_sampled < self.spans_per_second
        if sampled:
            self._spans_in_second = if_sampled
        ratio = self._window.record(second, sampled)
        return Vote(Decision.SAMPLED if sampled else Decision.NOT_SAMPLED, ratio)

    def estimate(self, trace: TraceView, now: float) -> float:
        return self._window.ratio()

    @property
    def description(self) -> str:
        return f"under {self.spans_per_second} spans per second"


LEAF_POLICIES: tuple[type[Policy], ...] = (
    AlwaysSample,
    Latency,
    NumericAttribute,
    Probabilistic,
    StatusCode,
    StringAttribute,
    RateLimiting,
    SpanCount,
    BooleanAttribute,
)
