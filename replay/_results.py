"""The replay results file: one row per rerun, in the ``replay_results`` schema, written atomically.

``tailcut compare --results`` reads it, so it follows :data:`tailcut.exporters.schema.REPLAY_RESULTS`
exactly (the schema version is stamped in the file's metadata). The file is written under a temporary
name and renamed into place: a reader, or a replay stopped by Ctrl-C, never leaves half a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tailcut._atomic import replacing
from tailcut.canonical import canonical_json
from tailcut.errors import ReplayError
from tailcut.exporters import schema
from tailcut.replay._corpus import CorpusRun
from tailcut.replay._rerun import RerunResult


def result_row(result: RerunResult, run: CorpusRun) -> dict[str, Any]:
    """The ``replay_results`` row of one judged rerun of ``run``."""
    rerun = result.rerun
    first = rerun.first_divergence
    return {
        "trace_id": rerun.trace_id,
        "mode": rerun.mode.value,
        "rerun": rerun.index,
        "passed": result.passed,
        "divergence": canonical_json(first.to_dict()) if first is not None else None,
        "divergence_count": len(rerun.divergences),
        "live_crossings": rerun.live_crossings,
        "served_crossings": rerun.served_crossings,
        "duration_ms": rerun.duration_ms,
        "error": rerun.error_text,
        "check_message": result.check_message,
        "harness_revision": rerun.harness_revision,
        "category": run.category,
        "baseline": run.baseline,
        "inclusion_probability": run.inclusion_probability,
        "started_at": rerun.started_at,
    }


def write_results(
    results: Sequence[RerunResult], runs: Mapping[str, CorpusRun], path: str | os.PathLike[str]
) -> Path:
    """Write ``results`` to ``path`` as Parquet (replacing it whole, or not at all).

    Raises
    ------
    ReplayError
        If the file cannot be written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path)
    rows = [result_row(r, runs[r.trace_id]) for r in results]
    table = pa.Table.from_pylist(rows, schema=schema.REPLAY_RESULTS)
    try:
        with replacing(target) as temporary:
            pq.write_table(table, temporary, compression="zstd")
    except OSError as exc:
        raise ReplayError(f"cannot write replay results to {target}: {exc.strerror or exc}") from None
    return target
