"""Estimates as plain records for ``--format json|csv``: every figure with its counts, interval and sample.

The keys are a stable contract (the README's analysis section lists them):

* an **estimate** is ``{"value", "numerator", "denominator", "n_effective", "low", "high", "confidence",
  "method", "sample"}``: ``numerator`` is the count with the property (for a 1/π-weighted rate the
  estimated population count ``Σ y/π``), ``denominator`` the rows it came from;
* a **difference** of group B from group A is ``{"value", "low", "high", "confidence", "method", "a",
  "b"}``, ``value = b.value − a.value``, with both groups' estimates.

CSV flattens a record's nested keys with dots (``baseline.a.numerator``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
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


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested keys joined with dots; lists become ``;``-joined text (one CSV cell)."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            flat[name] = ";".join(str(v) for v in value)
        else:
            flat[name] = value
    return flat


def to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """Records as CSV with a header: the union of their flattened keys, in first-seen order."""
    flat = [flatten(row) for row in rows]
    columns: dict[str, None] = {}
    for row in flat:
        columns.update(dict.fromkeys(row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in flat:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()
