"""``traces`` rows as tuples in the schema's column order, and their conversion to an Arrow table.

One row is built per trace on the event loop, so a row is a plain tuple (cheap to build) rather than a
dict, and the writer turns a batch of them into columns with one ``pa.array`` call per column instead of
``Table.from_pylist``'s per-cell work. A test checks the field order against
:func:`tailcut.exporters.schema.nanosecond_fields` of ``traces``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pyarrow as pa

from tailcut.exporters import schema


class TraceRow(NamedTuple):
    """One row of the ``traces`` table (times in Unix nanoseconds)."""

    trace_id: str
    service_name: str | None
    root_name: str | None
    agent_name: str | None
    start_time: int | None
    end_time: int | None
    duration_ms: float | None
    span_count: int
    error_count: int
    llm_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    max_depth: int
    max_tool_repeat: int
    schema_violations: int
    anomaly_score: float | None
    outcome: str | None
    outcome_score: float | None
    harness_revision: str | None
    kept: bool
    policies: list[str]
    baseline: bool
    inclusion_probability: float
    head_probability: float
    decision_reason: str
    decided_at: int
    env_revision: str | None
    prompt_version: str | None
    has_root: bool
    orphan_count: int
    late_spans: int
    # defaults: a write-ahead log written before these columns existed still replays
    cost_usd: float | None = None
    session_id: str | None = None
    user_id: str | None = None
    conversation_id: str | None = None
    census_version: int = 0
    root_failed: bool | None = None


def traces_table(rows: Sequence[TraceRow]) -> pa.Table:
    """The rows as a table with the ``traces`` schema."""
    fields = schema.nanosecond_fields("traces")
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in fields]
    arrays = {f.name: pa.array(column, type=f.type) for column, f in zip(columns, fields, strict=True)}
    return schema.from_nanoseconds("traces", arrays)
