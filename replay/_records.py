"""A replay report as records with stable keys (for JSON and CSV), and the exit status ``tailcut replay``
ends with. :mod:`tailcut.analysis._output` prints them, as it prints every command's result.

JSON (``tailcut replay --format json``) is one object:

=====================  ======================================================================================
key                    value
=====================  ======================================================================================
``corpus``             the corpus path
``mode``               ``recorded``, ``live`` or ``cut``
``reruns_per_trace``   ``-n``
``passed``             true when at least one rerun ran and every rerun passed
``exit_code``          the status the command exits with (see :func:`exit_status`)
``traces``             one object per replayed trace, in corpus order (below)
``skipped``            ``[{"trace_id", "reason"}]``: traces that cannot be replayed, and why
``canary``             null when it did not run, else ``{"caught": true|false|null, "trace_id",
                       "boundary", "detail"}`` (``caught`` null: inconclusive or not run)
``interrupted``        true when Ctrl-C stopped the replay
``results_file``       the ``--out`` Parquet file, or null
=====================  ======================================================================================

Each trace: ``trace_id``, ``label`` (its category, ``baseline`` or empty), ``mode``, ``reruns``,
``passed``, ``failed``, ``diverged`` (counts that add up to ``reruns``), ``rate`` (the line's text),
``pass_rate`` (an estimate record as the analysis commands write them: ``{"value", "numerator",
"denominator", "low", "high", "confidence": 0.95, "method": "wilson", "sample": "reruns"}``),
``bit_stable``, ``not_live``, ``first_divergence`` (text or null), ``unwrapped`` (third-party tool
crossings that ran live because the agent's tool is not wrapped for replay), ``rejected`` (third-party
tool calls the record says the framework refused before the tool ran, and that the reruns never asked
for) and ``not_compared`` (per boundary, what the live requests held that its third-party
records do not, so it was not compared).

CSV (``--format csv``) has one row per trace (:func:`report_rows`) with the columns :data:`CSV_COLUMNS`.
"""

from __future__ import annotations

from typing import Any, Final

from tailcut.replay._runner import ReplayReport, TraceSummary

#: Exit statuses of ``tailcut replay``.
EXIT_PASSED: Final = 0
EXIT_FAILED: Final = 1
EXIT_NOTHING_REPLAYED: Final = 3
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it
CSV_COLUMNS: Final = (
    "trace_id",
    "label",
    "mode",
    "reruns",
    "passed",
    "failed",
    "diverged",
    "pass_low",
    "pass_high",
    "bit_stable",
    "not_live",
    "first_divergence",
)
_CONFIDENCE: Final = 0.95


def exit_status(report: ReplayReport, *, strict: bool = True) -> int:
    """``0`` every rerun passed; ``1`` a rerun failed or diverged (unless not ``strict``) or the canary
    failed; ``3`` no trace could be replayed; ``130`` interrupted."""
    if report.interrupted:
        return EXIT_INTERRUPTED
    if report.canary is not None and report.canary.failed:
        return EXIT_FAILED
    if report.nothing_replayed:
        return EXIT_NOTHING_REPLAYED
    if strict and not report.passed:
        return EXIT_FAILED
    return EXIT_PASSED


def pass_rate_record(passed: int, n: int) -> dict[str, Any]:
    """Passed reruns of ``n`` as the analysis commands write an estimate, with its 95% Wilson interval."""
    from tailcut.analysis.stats import wilson_interval

    low, high = wilson_interval(passed, n)
    return {
        "value": passed / n if n else None,
        "numerator": passed,
        "denominator": n,
        "low": low,
        "high": high,
        "confidence": _CONFIDENCE,
        "method": "wilson",
        "sample": "reruns",
    }


def _trace(summary: TraceSummary) -> dict[str, Any]:
    return {
        "trace_id": summary.trace_id,
        "label": summary.label,
        "mode": summary.mode.value,
        "reruns": summary.n,
        "passed": summary.passed,
        "failed": summary.failed,
        "diverged": summary.diverged,
        "rate": summary.rate,
        "pass_rate": pass_rate_record(summary.passed, summary.n),
        "bit_stable": summary.bit_stable,
        "not_live": summary.not_live,
        "first_divergence": summary.first_divergence,
        "first_failure": summary.first_failure,
        "unwrapped": list(summary.unwrapped),
        "rejected": list(summary.rejected),
        "not_compared": list(summary.not_compared),
    }


def report_dict(report: ReplayReport, *, strict: bool = True) -> dict[str, Any]:
    """The report as the JSON object documented in the module docstring."""
    canary = report.canary
    plan = canary.plan if canary is not None else None
    return {
        "corpus": str(report.corpus),
        "mode": report.mode.value,
        "reruns_per_trace": report.n,
        "passed": report.passed,
        "exit_code": exit_status(report, strict=strict),
        "traces": [_trace(summary) for summary in report.traces()],
        "skipped": [{"trace_id": t, "reason": why} for t, why in report.skipped.items()],
        "canary": None
        if canary is None
        else {
            "caught": canary.caught,
            "trace_id": plan.trace_id if plan is not None else None,
            "boundary": plan.target.key if plan is not None else None,
            "detail": canary.detail,
        },
        "interrupted": report.interrupted,
        "results_file": str(report.out) if report.out is not None else None,
    }


def report_rows(report: ReplayReport) -> list[dict[str, Any]]:
    """One CSV row per replayed trace (:data:`CSV_COLUMNS` of each)."""
    rows = []
    for summary in report.traces():
        row = _trace(summary)
        row["pass_low"], row["pass_high"] = summary.low, summary.high
        rows.append({column: row[column] for column in CSV_COLUMNS})
    return rows
