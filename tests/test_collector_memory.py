"""A real ``tailcut collect`` under a flood stays within the memory the config promises.

Spans whose roots never arrive (8x the buffer budget) and then 60,000 one-span traces: every trace is
decided and gets its ``traces`` row, and the resident set grows by at most 3 x ``max_buffer_mib`` +
150 MiB over the idle process, warmed by one kept trace so that DuckDB's first use (some 70 MiB of
library code and first-call state, whatever the load) is not counted as the flood's
(``benchmarks/bench_flood_memory.py`` prints the figure for the issue's larger flood). Before the
writer's row groups were bounded by bytes, rows awaiting their late-span window by ``num_traces`` and
the Arrow pool returned freed memory, this flood grew it by 1.56x that allowance.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_peak_memory_under_a_flood_stays_within_the_configured_bound(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from bench_flood_memory import run_flood
    finally:
        sys.path.remove(str(BENCHMARKS))
    result = run_flood(budget_mib=16, orphan_multiple=8, one_span=60_000, directory=tmp_path)
    assert result.traces_rows == result.traces_sent  # every trace decided, one row each
    assert result.peak_mib <= result.bound_mib, (
        f"peak {result.peak_mib:.0f} MiB > bound {result.bound_mib:.0f} MiB (idle {result.idle_mib:.0f}, "
        f"cold {result.cold_mib:.0f})"
    )
