"""The traces table: one page of ``traces`` rows under the filters and sort a URL asks for.

Every trace seen has a row, kept or dropped, so the page states its exact denominators ("586 kept of
2,000 seen") and, for the kept traces that match, the traffic they stand for by Horvitz–Thompson
(Σ 1/π), the same rules ``tailcut report`` uses. One DuckDB query answers a page: the rows, the count of
matches and their kept count and weight come from window aggregates over the same filtered scan.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final
from urllib.parse import urlencode

from tailcut import attributes as attr
from tailcut.ui._errors import BadRequest

PAGE_SIZE: Final = 50
MAX_PAGE: Final = 10_000_000
#: Sort keys of the URL → the SQL expression they order by (an unpriced trace's cost is null: last).
SORTS: Final = {
    "start": "start_time",
    "duration": "duration_ms",
    "tokens": "(input_tokens + output_tokens)",
    "cost": "cost_usd",
}
#: Filters given as exact text values of a ``traces`` column.
COLUMN_FILTERS: Final = {
    "harness_revision": "t.harness_revision",
    "prompt_version": "t.prompt_version",
    "outcome": "t.outcome",
    "service": "t.service_name",
}
#: Every filter the URL may carry, in the order the form shows them.
FILTER_NAMES: Final = (
    "kept",
    "policy",
    "category",
    "boundary",
    *COLUMN_FILTERS,
    "since",
    "until",
    "q",
)
NO_POLICY: Final = "(none)"


@dataclass(frozen=True)
class TraceQuery:
    """What one traces page shows: its filters (name → text), sort key, direction and page number."""

    filters: Mapping[str, str] = field(default_factory=dict)
    sort: str = "start"
    descending: bool = True
    page: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TraceQuery:
        """Parse URL query parameters; raises :class:`BadRequest` naming the bad one and its choices."""
        filters = {name: params[name].strip() for name in FILTER_NAMES if params.get(name, "").strip()}
        if filters.get("kept", "yes") not in ("yes", "no"):
            raise BadRequest(f"kept must be yes or no, got {filters['kept']!r}")
        for name in ("since", "until"):
            if name in filters:
                _moment(name, filters[name])
        sort = params.get("sort", "start")
        if sort not in SORTS:
            raise BadRequest(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise BadRequest(f"order must be asc or desc, got {order!r}")
        try:
            page = int(params.get("page", "1"))
        except ValueError:
            raise BadRequest(f"page must be a whole number, got {params.get('page')!r}") from None
        if not 1 <= page <= MAX_PAGE:
            raise BadRequest(f"page must be between 1 and {MAX_PAGE:,}, got {page}")
        return cls(filters, sort, order == "desc", page)

    def url(self, **changes: Any) -> str:
        """The ``/`` URL of this query with some fields changed (``page=2``, ``sort="tokens"``)."""
        query = replace(self, **changes)
        params = dict(query.filters)
        if query.sort != "start":
            params["sort"] = query.sort
        if not query.descending:
            params["order"] = "asc"
        if query.page != 1:
            params["page"] = str(query.page)
        return "/?" + urlencode(params) if params else "/"

    def sorted_by(self, key: str) -> str:
        """The URL that sorts by ``key`` (flipping the direction when it already does), first page."""
        descending = not self.descending if key == self.sort else True
        return self.url(sort=key, descending=descending, page=1)


def _moment(name: str, text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name} must be an ISO 8601 time such as 2026-11-29T10:00, got {text!r}") from None
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment


def where_clause(filters: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The SQL predicate over ``traces t`` for the filters, and its named parameters."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if "kept" in filters:
        clauses.append("t.kept" if filters["kept"] == "yes" else "NOT t.kept")
    if "policy" in filters:
        if filters["policy"] == NO_POLICY:
            clauses.append("len(t.policies) = 0")
        else:
            clauses.append("list_contains(t.policies, $policy)")
            params["policy"] = filters["policy"]
    for name, column in (("category", "category"), ("boundary", "boundary")):
        if name in filters:
            clauses.append(f"t.trace_id IN (SELECT trace_id FROM findings WHERE {column} = ${name})")
            params[name] = filters[name]
    for name, column in COLUMN_FILTERS.items():
        if name in filters:
            clauses.append(f"{column} = ${name}")
            params[name] = filters[name]
    if "since" in filters:
        clauses.append("t.start_time >= $since")
        params["since"] = _moment("since", filters["since"])
    if "until" in filters:
        clauses.append("t.start_time < $until")
        params["until"] = _moment("until", filters["until"])
    if "q" in filters:
        clauses.append("contains(t.trace_id, $q)")
        params["q"] = filters["q"].lower()
    return (" AND ".join(clauses) or "true"), params


def page_sql(query: TraceQuery) -> tuple[str, dict[str, Any]]:
    """The one query of a traces page: its rows plus, on every row, the matches' count, kept and Σ 1/π.

    The totals come from an aggregate over the filtered rows, joined to the page (a window aggregate
    over every match would make DuckDB carry all their columns to the sort instead of keeping a top-N),
    and each page row's finding categories are looked up after the page is cut.
    """
    where, params = where_clause(query.filters)
    direction = "DESC" if query.descending else "ASC"
    order = f"{SORTS[query.sort]} {direction} NULLS LAST, trace_id"
    params["limit"] = PAGE_SIZE
    params["offset"] = (query.page - 1) * PAGE_SIZE
    sql = f"""
        WITH matched AS (SELECT * FROM traces t WHERE {where}),
        totals AS (
            SELECT count(*) AS matched, count(*) FILTER (WHERE kept) AS matched_kept,
                   sum(1.0 / inclusion_probability) FILTER (WHERE kept) AS matched_weight
            FROM matched
        ),
        page AS (SELECT * FROM matched p ORDER BY {order} LIMIT $limit OFFSET $offset)
        SELECT p.trace_id, p.start_time, p.duration_ms, p.span_count, p.error_count,
               p.input_tokens + p.output_tokens AS tokens, p.cost_usd, p.outcome, p.kept, p.baseline,
               p.inclusion_probability, p.policies, p.decision_reason, p.harness_revision,
               p.prompt_version, p.service_name, p.root_name,
               (SELECT list(DISTINCT f.category ORDER BY f.category) FROM findings f
                WHERE f.trace_id = p.trace_id) AS categories,
               totals.matched, totals.matched_kept, totals.matched_weight
        FROM page p, totals
        ORDER BY {order}
    """
    return sql, params


def count_sql(query: TraceQuery) -> tuple[str, dict[str, Any]]:
    """The totals of :func:`page_sql` alone, for a page past the last one (it has no row to carry them)."""
    where, params = where_clause(query.filters)
    sql = (
        "SELECT count(*) AS matched, count(*) FILTER (WHERE t.kept) AS matched_kept, "
        "sum(1.0 / t.inclusion_probability) FILTER (WHERE t.kept) AS matched_weight "
        f"FROM traces t WHERE {where}"
    )
    return sql, params


#: Characters of a run's input the traces table shows.
PREVIEW_CHARS: Final = 80
PREVIEW_SQL: Final = f"""
    SELECT trace_id,
           left(regexp_replace(coalesce(attributes['{attr.RUN_INPUT}'], request::VARCHAR), '\\s+', ' ', 'g'),
                {PREVIEW_CHARS}) AS preview
    FROM spans WHERE list_contains($ids, trace_id) AND parent_span_id IS NULL
"""
"""The start of each listed kept trace's run input (its root span's ``tailcut.run.input``, else the
root's request: an llm-rooted trace), one line; dropped traces have no spans to read it from."""


@dataclass(frozen=True)
class TracePage:
    """One page of the traces table and the totals of everything the filters match."""

    query: TraceQuery
    rows: list[dict[str, Any]]
    matched: int
    matched_kept: int
    matched_weight: float

    @property
    def pages(self) -> int:
        return max(1, -(-self.matched // PAGE_SIZE))

    @property
    def first_row(self) -> int:
        return (self.query.page - 1) * PAGE_SIZE + 1 if self.rows else 0

    @property
    def last_row(self) -> int:
        return (self.query.page - 1) * PAGE_SIZE + len(self.rows)


def page_from_rows(query: TraceQuery, rows: list[dict[str, Any]], totals: Mapping[str, Any]) -> TracePage:
    """A :class:`TracePage` from the rows of :func:`page_sql` (or the totals of :func:`count_sql`)."""
    return TracePage(
        query=query,
        rows=rows,
        matched=int(totals.get("matched") or 0),
        matched_kept=int(totals.get("matched_kept") or 0),
        matched_weight=float(totals.get("matched_weight") or 0.0),
    )
