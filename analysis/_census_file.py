"""The census of a data dir, kept beside its findings, so ``tailcut compare`` hashes no trace id.

``tailcut compare`` is a gate run on every build. The census flags (:mod:`._census`) need each agent's
reference for the z-scores (medians and MADs over the baseline slice) and the findings joined by trace id:
about 60 ms on the benchmark's 73k traces, against 3 ms for one scan of ``traces``. Like the findings,
they depend only on the files present, so they are computed once per change of the data dir and stored
beside the findings with the same source key (:mod:`._findings`).

``DATA/census/census.parquet`` has one row per ``traces`` row, in the order of the ``traces`` files its
metadata lists (``tailcut.census.files``), each file's rows in their order:

- ``head``: the row's head probability (1 when it was not head-sampled);
- ``inclusion_probability``: the row's π;
- ``trace_no``: one number for all the rows of one trace (a trace whose late spans came after its
  decision has several rows);
- ``bits``: the row's booleans, bit *i* for the *i*-th name of :data:`BITS` (also in the metadata,
  ``tailcut.census.bits``): kept, in the baseline slice, tail-kept, then per census category its flag,
  then per category "the trace has a finding of it".

A comparison reads the listed ``traces`` files for its groups' predicate alone and pairs their rows with
the census rows by position (DuckDB's ``POSITIONAL JOIN``), and one grouped query returns both groups'
census counts and kept traces as a few dozen rows (:meth:`Census.grouped`). The pairing holds because
the source key names every file with its size and a data file never changes once renamed into place:
while the key matches, the listed files hold the same rows in the same order. A listed file removed since
(a compaction) fails the read, and the caller computes the census again.

A remote or read-only data dir, and a session whose findings come from other thresholds, compute the census
in the session and keep it in memory, for the session's later comparisons while the files and the findings
stay the same (the viewer's ``/compare`` pages, a notebook comparing again).
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tailcut._atomic import replacing
from tailcut.analysis import _census, _findings, _source
from tailcut.analysis._classify import CATEGORIES

if TYPE_CHECKING:
    import pyarrow as pa

    from tailcut.analysis._dataset import Dataset

#: The census file's folder of the data dir (not ``findings/``, which engines read as the findings table),
#: and the file.
DIRECTORY: Final = "census"
FILE: Final = "census.parquet"
#: The booleans packed into ``bits``, lowest bit first, and each one's SQL over ``_census c`` joined with
#: the findings ``f`` (:data:`._census.FOUND`).
_BIT_SQL: Final = {
    "kept": "c.kept",
    "baseline": "c.baseline",
    "tail": "c.tail",
    **{f"flag_{c}": f"c.flag_{c}" for c in _census.CENSUS_CATEGORIES},
    **{f"found_{c}": f"f.found_{c}" for c in CATEGORIES},
}
BITS: Final = tuple(_BIT_SQL)
#: Parquet key-value metadata of the census file.
_SOURCE_KEY: Final = b"tailcut.census.source"
_FILES: Final = b"tailcut.census.files"
_COVERAGE: Final = b"tailcut.census.coverage"
_BITS: Final = b"tailcut.census.bits"
_DUPLICATES: Final = b"tailcut.census.duplicates"
_COLUMNS: Final = b"tailcut.census.columns"
#: The in-memory census of a session that cannot store it.
_IN_MEMORY: Final = "_census_rows"
#: Per session, the census kept in memory (registered as :data:`_IN_MEMORY`), with the source key and the
#: findings generation (:attr:`Dataset.findings_generation`) it was computed for.
_HELD: weakref.WeakKeyDictionary[Dataset, tuple[str, int, Census]] = weakref.WeakKeyDictionary()


def path(location: str) -> Path:
    """Where a local data dir's census file is."""
    return Path(location, DIRECTORY, FILE)


def bit(name: str) -> int:
    """The mask of one of :data:`BITS` in ``bits``.

    >>> bit("kept"), bit("tail")
    (1, 4)
    """
    return 1 << BITS.index(name)


@dataclass(frozen=True)
class Census:
    """The census rows of the ``traces`` files present, and which categories they decide.

    Attributes
    ----------
    relation : str
        SQL naming the census rows (the stored file, or a table of this session).
    files : tuple of str
        The ``traces`` files the rows line up with, in order (full paths or URLs).
    coverage : CensusCoverage
        The census categories (:func:`._census.build`).
    duplicates : bool
        Whether some trace has several rows (then :meth:`grouped` merges them first).
    columns : mapping of str to str
        The columns of those files and their DuckDB types (:func:`._source.scanned_columns`), so a
        comparison reads them without opening their footers first.
    """

    relation: str
    files: tuple[str, ...]
    coverage: _census.CensusCoverage
    duplicates: bool
    columns: Mapping[str, str]

    def grouped(
        self, dataset: Dataset, predicate: str, params: tuple[Sequence[Any], Sequence[Any]]
    ) -> list[tuple[bool, bool, float, float, int, int]]:
        """``(in A, in B, head, π, bits, traces)`` for the traces of the two groups (``predicate`` over a
        ``traces`` row with each group's values for its ``?``), one row per distinct combination.

        A trace with several rows is one trace, in a group when any of its rows is, with every flag any of
        its rows has."""
        if not self.files:
            return []
        connection = dataset.connection
        merged = (
            ", merged AS (SELECT bool_or(in_0) AS in_0, bool_or(in_1) AS in_1, any_value(head) AS head, "
            "max(inclusion_probability) AS inclusion_probability, bit_or(bits) AS bits "
            "FROM paired GROUP BY trace_no)"
            if self.duplicates
            else ""
        )
        scan = _source.current_columns(
            "traces", self.columns, _source.parquet_scan(_source.file_list(self.files))
        )
        query = f"""
WITH rows AS (SELECT ({predicate}) AS in_0, ({predicate}) AS in_1 FROM ({scan})),
paired AS (SELECT * FROM rows POSITIONAL JOIN {self.relation}){merged}
SELECT in_0, in_1, head, inclusion_probability, bits, count(*)
FROM {"merged" if self.duplicates else "paired"} WHERE in_0 OR in_1 GROUP BY ALL
"""
        with dataset.reading(query):
            return connection.execute(query, [*params[0], *params[1]]).fetchall()


def current(dataset: Dataset, *, store: bool = True) -> Census:
    """The census of ``dataset``'s files now: the stored one when its source key matches, else computed
    (and, with ``store``, stored where the findings are stored too; findings computed on the way are
    stored likewise)."""
    dataset.ensure_findings(store=store)
    listed = _findings.source_files(dataset)
    key = _findings.source_key(dataset, listed)
    remote = _source.is_remote(dataset.location)
    files = tuple(name if remote else str(Path(dataset.location, name)) for name, _ in listed["traces"])
    stored = None if remote else _read(dataset.location, key, files)
    if stored is not None:
        return stored
    held = _HELD.get(dataset)
    if held is not None and held[:2] == (key, dataset.findings_generation):
        return held[2]
    if not files:
        return Census(_IN_MEMORY, files, _census.build(dataset), duplicates=False, columns={})
    coverage = _census.build(dataset, files=files)
    table = _rows(dataset, files)
    duplicates = bool(len(table)) and int(table.column("trace_no").to_numpy().max()) + 1 < len(table)
    with dataset.reading():
        columns = _source.scanned_columns(dataset.connection, _source.parquet_scan(_source.file_list(files)))
    census = Census(_IN_MEMORY, files, coverage, duplicates, columns)
    if store and not remote and dataset.findings_key == key:
        written = _write(dataset.location, table, key, listed["traces"], census)
        if written is not None:
            return dataclasses.replace(census, relation=f"read_parquet('{_source.quote(str(written))}')")
    dataset.connection.register(_IN_MEMORY, table)
    _HELD[dataset] = (key, dataset.findings_generation, census)
    return census


def _rows(dataset: Dataset, files: Sequence[str]) -> pa.Table:
    """The census rows of the ``_census`` table :func:`._census.build` filled from ``files``, in their
    order."""
    packed = " + ".join(
        f"(CASE WHEN coalesce({column}, false) THEN {bit(name)} ELSE 0 END)"
        for name, column in _BIT_SQL.items()
    )
    query = f"""
SELECT c.head, c.inclusion_probability, (dense_rank() OVER (ORDER BY c.trace_id) - 1)::INTEGER AS trace_no,
       ({packed})::INTEGER AS bits
FROM {_census.TABLE} c LEFT JOIN {_census.FOUND} f USING (trace_id)
ORDER BY list_position($files, c.filename), c.file_row_number
"""
    return dataset.sql_arrow(query, params={"files": list(files)})


def _write(
    location: str, table: pa.Table, key: str, files: Sequence[tuple[str, int]], census: Census
) -> Path | None:
    """Write the census file atomically; None if it cannot be written (the census then stays in memory)."""
    import pyarrow.parquet as pq

    coverage = census.coverage
    metadata = {
        _SOURCE_KEY: key.encode(),
        _FILES: json.dumps([name for name, _ in files]).encode(),
        _COVERAGE: json.dumps(
            {"categories": coverage.categories, "reasons": dict(coverage.reasons)}
        ).encode(),
        _BITS: json.dumps(BITS).encode(),
        _DUPLICATES: json.dumps(census.duplicates).encode(),
        _COLUMNS: json.dumps(dict(census.columns)).encode(),
    }
    target = path(location)
    try:
        with replacing(target) as temporary:
            pq.write_table(table.replace_schema_metadata(metadata), temporary, compression="zstd")
    except OSError:
        return None
    return target


def _read(location: str, key: str, files: Sequence[str]) -> Census | None:
    """The stored census when it was computed from exactly ``files`` (source key ``key``), else None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored = path(location)
    try:
        metadata = pq.read_schema(stored).metadata or {}
        if metadata.get(_SOURCE_KEY) != key.encode() or json.loads(metadata[_BITS]) != list(BITS):
            return None
        names = json.loads(metadata[_FILES])
        coverage = json.loads(metadata[_COVERAGE])
        duplicates = bool(json.loads(metadata[_DUPLICATES]))
        columns = {str(name): str(type_) for name, type_ in json.loads(metadata[_COLUMNS]).items()}
    except (OSError, pa.ArrowException, KeyError, ValueError, AttributeError):
        return None
    if [str(Path(location, name)) for name in names] != list(files):
        return None
    return Census(
        f"read_parquet('{_source.quote(str(stored))}')",
        tuple(files),
        _census.CensusCoverage(tuple(coverage["categories"]), dict(coverage["reasons"])),
        duplicates,
        columns,
    )
