"""The stored ``trace_checks`` rows as the classifier takes them: findings, tool lists, drift problems.

After :func:`._features_coverage.usable`, :func:`stored` reads the rows in one go and :func:`read` turns
them into the findings the writers judged and the ``schema_drift`` problems of the stored tool calls,
judged against every schema version the data dir holds (see :mod:`._features`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tailcut.analysis import _rules, _toolcalls
from tailcut.analysis._features import CHECKS_VIEW
from tailcut.analysis._features_coverage import UNCOVERED

if TYPE_CHECKING:
    import pyarrow as pa

    from tailcut.analysis._dataset import Dataset
    from tailcut.analysis._features_coverage import Coverage


class Stored(NamedTuple):
    """The ``trace_checks`` rows (after :func:`usable`): every tool list (``(first span, list key, tools
    JSON)``) and enforced schema (``(tool, sha, schema JSON)``) the written batches held, as the schema book
    takes them, and the rows with findings or tool calls of the traces the features describe."""

    lists: list[tuple[str, str, str | None]]
    enforced: list[tuple[str, str, str | None]]
    checks: pa.Table


def stored(dataset: Dataset, coverage: Coverage) -> Stored:
    """The ``trace_checks`` rows, in one read (see :class:`Stored`)."""
    covered = f", trace_id NOT IN (SELECT trace_id FROM {UNCOVERED}) AS covered" if coverage.partial else ""
    table = dataset.connection.sql(
        f"SELECT local_findings, calls, tool_lists, enforced, trace_id{covered} FROM {CHECKS_VIEW}"
    ).to_arrow_table()
    lists = [(e["first"], e["key"], e["tools"]) for e in _flatten(table, "tool_lists").to_pylist()]
    enforced: dict[tuple[str, str], str | None] = {}
    for e in _flatten(table, "enforced").to_pylist():
        enforced[(e["tool"], e["sha"])] = enforced.get((e["tool"], e["sha"])) or e["schema"]
    checks = table.select(["local_findings", "calls", "trace_id"])
    if coverage.partial:  # (filtering copies every row)
        checks = checks.filter(table["covered"])
    return Stored(lists, sorted((t, s, schema) for (t, s), schema in enforced.items()), checks)


def read(
    book: _toolcalls.SchemaBook, checks: pa.Table, findings: pa.Schema
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """From the ``checks`` rows of :func:`stored`: the findings written with the features but
    ``schema_drift`` (``error``, ``schema_violation``, and ``tool_loop`` and ``silent_degradation`` as the
    writers judged them: see :func:`._features_coverage.written_judgments_hold`), in the classifier's
    ``findings`` schema, the ``schema_drift`` findings of identical retries and the drift problems of the
    stored tool calls (judged against ``book``; a table of :func:`._toolcalls.problems_schema`). No SQL: the
    classifier runs this while its first statements run."""
    import pyarrow.compute as pc

    local = _flatten(checks, "local_findings").select(list(_rules.FINDING_COLUMNS)).cast(findings)
    drift = pc.equal(local["category"], "schema_drift")
    calls = _flatten(checks, "calls").sort_by(
        [("trace_id", "ascending"), ("seq", "ascending"), ("call_index", "ascending")]
    )
    return local.filter(pc.invert(drift)), local.filter(drift), _drift_problems(book, calls)


def _drift_problems(book: _toolcalls.SchemaBook, calls: pa.Table) -> pa.Table:
    """The ``schema_drift`` problems of the stored tool calls (rows of the ``calls`` structs), in their order,
    as a table of :func:`._toolcalls.problems_schema`.

    A call whose stored verdicts cover every checkable version of its tool is judged by its tool, tool list,
    enforced schema and verdicts alone (its arguments are only ever validated through them), so the first
    call of each such group is checked and the others take its problem; any other call is checked on its
    own. The groups are found in Arrow (:func:`_judging_keys`): only those calls become Python dicts.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def drift(call: dict[str, Any]) -> _toolcalls.CallProblem | None:  # check yields at most one drift
        book.remember(call["arguments"], ((v["sha"], v["problem"]) for v in call["verdicts"] or ()))
        return next((p for p in _toolcalls.check(book, call) if p.category == "schema_drift"), None)

    keys = _judging_keys(calls)
    encoded = pc.dictionary_encode(keys)
    groups = encoded.indices
    settled, judged = [], []
    for call in calls.take(pc.index_in(encoded.dictionary, value_set=keys)).to_pylist():  # each group's first
        shas = {v["sha"] for v in call["verdicts"] or ()}
        versions = book.versions.get(call["tool"], {})
        settled.append(bool(shas) and all(sha in shas or not book.checkable(sha) for sha in versions))
        judged.append(drift(call) if settled[-1] else None)
    alone = pc.invert(pc.take(pa.array(settled, pa.bool_()), groups))
    own = [drift(call) for call in calls.filter(alone).to_pylist()]
    found = calls.select(["trace_id", "span_id", "name", "kind", "boundary", "occurrence", "seq"])
    for name in ("category", "layer", "evidence", "confidence"):
        kind = _toolcalls.problems_schema().field(name).type
        column = pc.take(pa.array([None if p is None else getattr(p, name) for p in judged], kind), groups)
        mine = pa.array([None if p is None else getattr(p, name) for p in own], kind)
        found = found.append_column(name, pc.replace_with_mask(column, alone, mine))
    return found.filter(pc.is_valid(found["category"])).cast(_toolcalls.problems_schema())


def _judging_keys(calls: pa.Table) -> pa.Array:
    """Per call, bytes equal for two calls exactly when their tool, tool list, enforced schema and stored
    verdicts are (no verdicts as an empty list): the texts joined by bytes that never occur in UTF-8
    (``0xff`` between the parts, ``0xfc`` between verdicts, ``0xfd`` between a verdict's sha and problem,
    ``0xfe`` for null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def join(*parts: Any) -> Any:
        *texts, separator = parts
        binary = [pc.cast(text, pa.binary()) for text in texts]
        return pc.binary_join_element_wise(
            *binary, separator, null_handling="replace", null_replacement=b"\xfe"
        )

    verdicts = calls.column("verdicts").combine_chunks()
    each = verdicts.values
    items = join(pc.struct_field(each, "sha"), pc.struct_field(each, "problem"), b"\xfd")
    listed = pa.ListArray.from_arrays(verdicts.offsets, items, mask=verdicts.is_null())
    joined = pc.fill_null(pc.binary_join(listed, b"\xfc"), b"")  # no verdicts as none: the empty bytes
    return join(calls["tool"], calls["tools_key"], calls["enforced_sha"], joined, b"\xff").combine_chunks()


def _flatten(table: pa.Table, column: str) -> pa.Table:
    """The structs of list column ``column``, one row each, with the ``trace_id`` of their row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = table.column(column).combine_chunks()
    structs = pc.list_flatten(values)
    owners = pc.take(table.column("trace_id"), pc.list_parent_indices(values))
    return pa.Table.from_struct_array(structs).append_column("trace_id", owners)
