"""The classifier's per-trace features: what they are called, which rules they were computed under.

Computed once when a trace's spans are written, read at classify time; one module per job:

- :mod:`._features_compute`: **on write**, the ``trace_features`` and ``trace_checks`` rows of a batch of
  spans, computed with the classifier's own SQL in a private DuckDB connection
  (:func:`._features_compute.trace_features`);
- :mod:`._features_worker`: the post-write hook that runs that computation beside a data-dir writer, on a
  thread of its own (the collector and ``tailcut ingest`` wire it in; the in-process exporter does not);
- :mod:`._features_coverage`: **on classify**, which traces the stored features describe exactly, so that
  they stand in for those traces' spans (the others are classified from their spans);
- :mod:`._features_stored`: the stored ``trace_checks`` rows as findings and ``schema_drift`` problems.

This module holds what they share: table and view names, :data:`VERSION` and the ``rules`` key, the flat
role columns and the categories the writers judge.
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Final

from tailcut.analysis import _rules
from tailcut.exporters.conventions import observations

TABLE: Final = "trace_features"
CHECKS_TABLE: Final = "trace_checks"
#: Bumped whenever what the features hold or how they are computed changes (old rows are then not used).
VERSION: Final = 5  # 4: broken-JSON arguments, invalid_tool_calls, recorded tool schemas; 5: ToolOutput text
#: The relations the classifier reads them through.
VIEW: Final = "_features"
CHECKS_VIEW: Final = "_checks"
#: The categories judged from the trace alone that the writers also judge (with the default thresholds),
#: beside ``error``, ``schema_violation`` and ``schema_drift`` of identical retries, with their queries; in
#: the order of the flags of ``_JUDGEABLE`` that say whether the batch has a trace they could find (else the
#: query is not run).
WRITTEN_JUDGMENTS: Final = (("tool_loop", _rules.LOOP_SQL), ("silent_degradation", _rules.SILENT_SQL))


def rules_key(
    drift_min_attempts: int,
    transient_errors: str,
    observation_rules: tuple[observations.ObservationRule, ...] = observations.RULES,
) -> str:
    """The ``rules`` column: the version and the thresholds the written features depend on."""
    digest = hashlib.sha256(transient_errors.encode()).hexdigest()[:16]
    observed = observations.rules_key(observation_rules)
    return (
        f"v{VERSION} drift_min_attempts={drift_min_attempts} transient_errors={digest} "
        f"observations={observed}"
    )


@cache
def role_fields() -> list[tuple[str, str]]:
    """``(role, field)`` of every flat role column of ``trace_features`` (``root_span_id``...)."""
    from tailcut.exporters.schema import ROLE_FIELDS

    return [(role, field.name) for role, fields in ROLE_FIELDS.items() for field in fields]
