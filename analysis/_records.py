"""Estimates as plain records for ``--format json|csv``: every figure with its counts, interval and sample.

The keys are a stable contract (the README's analysis section lists them):

* an **estimate** is ``{"value", "numerator", "denominator", "n_effective", "low", "high", "confidence",
  "method", "sample"}``: ``numerator`` is the count with the property (for a 1/π-weighted rate the
  estimated population count ``Σ y/π``), ``denominator`` the rows it came from;
* a **difference** of group B from group A is ``{"value", "low", "high", "confidence", "method", "a",
  "b"}``, ``value = b.value − a.value``, with both groups' estimates.

:mod:`tailcut.analysis._output` prints them (CSV flattens nested keys with dots: ``baseline.a.numerator``).
"""

from __future__ import annotations

from typing import Any

from tailcut.analysis import stats


def estimate_record(estimate: stats.Estimate | None) -> dict[str, Any] | None:
    """An :class:`~tailcut.analysis.stats.Estimate` as a record (None stays None)."""
    if estimate is None:
        return None
    return {
        "value": estimate.value,
        "numerator": estimate.successes,
        "denominator": estimate.n,
        "n_effective": estimate.n_effective,
        "low": estimate.low,
        "high": estimate.high,
        "confidence": estimate.confidence,
        "method": estimate.method,
        "sample": estimate.sample,
    }


def value_record(estimate: stats.ValueEstimate) -> dict[str, Any]:
    """A mean or total (:class:`~tailcut.analysis.stats.ValueEstimate`) as a record."""
    return {
        "value": estimate.value,
        "standard_error": estimate.standard_error,
        "denominator": estimate.n,
        "low": estimate.low,
        "high": estimate.high,
        "confidence": estimate.confidence,
        "method": estimate.method,
        "sample": estimate.sample,
    }


def difference_record(difference: stats.Difference | None) -> dict[str, Any] | None:
    """B − A as a record; ``difference.first`` is B and ``difference.second`` is A."""
    if difference is None:
        return None
    return {
        "value": difference.value,
        "low": difference.low,
        "high": difference.high,
        "confidence": difference.confidence,
        "method": difference.method,
        "a": estimate_record(difference.second),
        "b": estimate_record(difference.first),
    }
