"""The trace-id hash of the Collector's ``probabilistic`` tail-sampling policy, reproduced exactly.

Keeping the same hash as the Collector makes baseline membership a property of the trace id alone:
every tailcut (and every Collector running the same ``tail_sampling`` block with the same salt) puts the
same traces in the uniform slice, whatever else happened in them.

The algorithm, from ``processor/tailsamplingprocessor/internal/sampling/probabilistic.go`` in
opentelemetry-collector-contrib (``hashTraceID`` and ``calculateThreshold``):

* hash: 64-bit FNV-1a (``hash/fnv.New64a``) over the salt's bytes, then the 16 trace-id bytes;
* threshold: ``MaxUint64 * ratio`` computed with Go's ``big.Float`` (the product rounded to 64 bits of
  mantissa, to nearest even, then truncated to an integer; ratios >= 1 give ``MaxUint64``);
* the trace is sampled when ``hash <= threshold``;
* an empty ``hash_salt`` means the default salt ``"default-hash-seed"`` (``defaultHashSalt``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final

FNV_OFFSET_BASIS: Final = 0xCBF29CE484222325
FNV_PRIME: Final = 0x100000001B3
MAX_UINT64: Final = (1 << 64) - 1
#: The Collector's salt when ``hash_salt`` is empty or absent.
DEFAULT_HASH_SALT: Final = "default-hash-seed"


def fnv1a_64(data: bytes, state: int = FNV_OFFSET_BASIS) -> int:
    """64-bit FNV-1a of ``data``, continuing from ``state`` (the offset basis for a fresh hash).

    Reduced modulo 2**64 once at the end, not after every byte: the low 64 bits of a product and of an
    xor with a byte depend only on the low 64 bits of their operands, so the result is the same.
    """
    for byte in data:
        state = (state ^ byte) * FNV_PRIME
    return state & MAX_UINT64


def sampling_threshold(ratio: float) -> int:
    """The largest hash the Collector samples at ``ratio`` (``sampling_percentage / 100``).

    Parameters
    ----------
    ratio
        Fraction of traces to keep; values >= 1 keep every trace, values <= 0 keep only hash 0.

    Examples
    --------
    >>> sampling_threshold(0.5) == 2**63 - 1
    True
    >>> sampling_threshold(1.0) == 2**64 - 1
    True
    """
    if ratio <= 0:
        return 0
    exact = Fraction(MAX_UINT64) * Fraction(ratio)
    if exact >= MAX_UINT64:
        return MAX_UINT64
    # big.Float keeps 64 mantissa bits (the precision SetInt gave the receiver), rounding to nearest even.
    unit = Fraction(2) ** (exact.numerator.bit_length() - exact.denominator.bit_length() - 64)
    while exact >= unit * (1 << 64):
        unit *= 2
    while exact < unit * (1 << 63):
        unit /= 2
    rounded = round(exact / unit) * unit
    return min(int(rounded), MAX_UINT64)  # Uint64() truncates toward zero


class TraceIdSampler:
    """Decides membership of the uniform slice for one ``(hash_salt, sampling_percentage)`` pair.

    Parameters
    ----------
    sampling_percentage
        Percentage of traces kept (``>= 100`` keeps all).
    hash_salt
        The policy's ``hash_salt``; empty means the Collector's default salt.
    """

    __slots__ = ("_salted_state", "ratio", "salt", "threshold")

    def __init__(self, sampling_percentage: float, hash_salt: str = "") -> None:
        self.salt = hash_salt or DEFAULT_HASH_SALT
        self.ratio = min(max(sampling_percentage / 100.0, 0.0), 1.0)
        self.threshold = sampling_threshold(sampling_percentage / 100.0)
        self._salted_state = fnv1a_64(self.salt.encode())

    def hash(self, trace_id: bytes) -> int:
        """The Collector's hash of a 16-byte trace id under this salt."""
        return fnv1a_64(trace_id, self._salted_state)

    def sampled(self, trace_id: bytes) -> bool:
        return fnv1a_64(trace_id, self._salted_state) <= self.threshold
