"""Head sampling upstream, as the W3C ``tracestate`` states it: OpenTelemetry's ``ot=th:`` threshold.

The OpenTelemetry probability-sampling specification (TraceState: Probability Sampling) puts the
sampler's *rejection threshold* T in the ``th`` sub-key of the ``ot`` member: 1 to 14 lowercase hex
digits, padded with trailing zeros to 56 bits. A span is kept when the trace's 56-bit randomness is at
least T, so its sampling probability is ``1 - T / 2**56`` (``th:0`` is 100%). When samplers are consistent
(they compare the same randomness), every span of a trace is present exactly when the randomness passes
the largest threshold among them, so the trace's head-sampling probability is that of the largest ``th``.

A tail stage may only lower the probability (raise the threshold). For the spans it forwards of a trace
it kept by the uniform baseline slice alone, :func:`forwarded_tracestate` states the combined
probability, head times tail, as the new ``th``, so a backend after tailcut counts each such span
``1/π`` times.
"""

from __future__ import annotations

import re
from typing import Final

#: 2**56: thresholds and randomness are 56-bit.
MAX_THRESHOLD: Final = 1 << 56
_HEX: Final = re.compile(r"[0-9a-f]{1,14}")


def threshold(tracestate: str | bytes) -> int | None:
    """The ``ot=th:`` rejection threshold of a W3C ``tracestate`` value, or None when absent or invalid."""
    text = tracestate.decode("ascii", "replace") if isinstance(tracestate, bytes) else tracestate
    for member in text.split(","):
        key, sep, value = member.strip().partition("=")
        if not sep or key != "ot":
            continue
        for field in value.split(";"):
            name, sep, digits = field.partition(":")
            if sep and name == "th":
                return int(digits.ljust(14, "0"), 16) if _HEX.fullmatch(digits) else None
        return None
    return None


def probability(rejection_threshold: int) -> float:
    """The sampling probability a threshold stands for: ``1 - T / 2**56``."""
    return (MAX_THRESHOLD - rejection_threshold) / MAX_THRESHOLD


def threshold_for(sampling_probability: float) -> int:
    """The rejection threshold of a sampling probability in (0, 1] (rounded to 56 bits)."""
    if not 0 < sampling_probability <= 1:
        raise ValueError(f"a sampling probability is in (0, 1]; got {sampling_probability}")
    return min(round((1 - sampling_probability) * MAX_THRESHOLD), MAX_THRESHOLD - 1)


def encode_threshold(rejection_threshold: int) -> str:
    """``th``'s value: 14 hex digits with the trailing zeros dropped (``0`` for 100%)."""
    return f"{rejection_threshold:014x}".rstrip("0") or "0"


def with_threshold(tracestate: str, rejection_threshold: int) -> str:
    """``tracestate`` with ``ot``'s ``th`` set (other ``ot`` sub-keys kept); the ``ot`` member goes first,
    as W3C Trace Context asks of a modified member."""
    others, fields = [], []
    for member in filter(None, (m.strip() for m in tracestate.split(","))):
        key, _, value = member.partition("=")
        if key == "ot":
            fields = [f for f in value.split(";") if f and not f.startswith("th:")]
        else:
            others.append(member)
    ot = ";".join([f"th:{encode_threshold(rejection_threshold)}", *fields])
    return ",".join([f"ot={ot}", *others])


def forwarded_tracestate(tracestate: str, combined_probability: float) -> str:
    """The ``tracestate`` a forwarded span carries when the tail stage kept it with ``combined_probability``
    (head times tail): the threshold only ever rises, as the specification requires."""
    current = threshold(tracestate) or 0
    return with_threshold(tracestate, max(current, threshold_for(combined_probability)))
