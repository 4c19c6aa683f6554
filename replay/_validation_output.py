"""A validation as text, as JSON with stable keys, and as its results file.

JSON (``tailcut validate --format json``) is one object:

===================  ===================================================================================
key                  value
===================  ===================================================================================
``verdict``          ``resolved``, ``not resolved``, ``does not exercise the change`` or ``resolved, but
                     breaks N of M unrelated``
``exit_code``        0 resolved, 1 otherwise (2, could not run, prints ``{"error": "..."}`` instead)
``agent``            the new entry point; ``baseline_agent`` the old one; ``check`` the check's name
``reruns_per_trace`` ``-n``
``estimated_cost``   ``{usd, calls, input_tokens, output_tokens, unpriced_models, max_cost}`` of the model
                     calls the cuts run live (``usd`` null when a model has no price)
``live_model_calls`` the model calls the reruns made live
``incidents``        per incident: ``trace_id``, ``label``, ``verdict``, ``cut`` (boundaries), ``cut_from``
                     (``finding`` or ``--live``), ``finding`` (``{category, boundary, occurrence, layer,
                     evidence}`` or null), ``new`` and ``baseline`` (below)
``golden``           ``{source, cut, traces, broken, list}``; ``list`` has per golden trace ``trace_id``,
                     ``label``, ``status`` (``broken``, ``fixed``, ``unchanged``, ``fails with both``),
                     ``reason`` (why it is broken, else null), ``first_divergence``, ``new``, ``baseline``
``results_file``     the ``--out`` Parquet file, or null
===================  ===================================================================================

Each ``new`` / ``baseline`` is ``{rate, mode, reruns, passed, diverged, pass_rate, first_failure,
first_divergence}``: ``passed`` counts the reruns whose check passed, ``diverged`` those that left the
record anywhere, ``pass_rate`` is an estimate record as ``tailcut replay`` writes it.

The results file has the ``validate_results`` schema (:data:`tailcut.exporters.schema.VALIDATE_RESULTS`),
one row per rerun, and the JSON object above in its metadata under :data:`SUMMARY_KEY`, so ``tailcut ui``
shows the validation as it was printed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tailcut.errors import ReplayError
from tailcut.replay._records import pass_rate_record

if TYPE_CHECKING:
    from tailcut.replay._corpus import CorpusRun
    from tailcut.replay._rerun import RerunResult
    from tailcut.replay._validate import GoldenResult, IncidentResult, Reruns, Role, Sample, Validation

#: The key of the validation's JSON summary in its results file's Parquet metadata.
SUMMARY_KEY: Final = b"tailcut.validate"


def _side(reruns: Reruns) -> dict[str, Any]:
    first = reruns.first_divergence
    return {
        "rate": reruns.rate,
        "mode": reruns.mode.value,
        "reruns": reruns.n,
        "passed": reruns.passed,
        "diverged": reruns.diverged,
        "pass_rate": pass_rate_record(reruns.passed, reruns.n),
        "first_failure": reruns.failure,
        "first_divergence": str(first) if first is not None else None,
    }


def _incident(incident: IncidentResult) -> dict[str, Any]:
    finding = incident.finding
    return {
        "trace_id": incident.trace_id,
        "label": incident.label,
        "verdict": incident.verdict,
        "cut": list(incident.cut),
        "cut_from": incident.cut_from,
        "finding": None
        if finding is None
        else {
            "category": finding.category,
            "boundary": finding.boundary,
            "occurrence": finding.occurrence,
            "layer": finding.layer,
            "evidence": finding.evidence,
        },
        "new": _side(incident.new),
        "baseline": _side(incident.old),
    }


def _golden(trace: GoldenResult) -> dict[str, Any]:
    divergence = trace.new_divergence or trace.new.first_divergence
    return {
        "trace_id": trace.trace_id,
        "label": trace.label,
        "status": trace.status,
        "reason": trace.reason,
        "first_divergence": str(divergence) if divergence is not None else None,
        "new": _side(trace.new),
        "baseline": _side(trace.old),
    }


def validation_dict(validation: Validation) -> dict[str, Any]:
    """The validation as the JSON object documented in the module docstring."""
    return {
        "verdict": validation.verdict,
        "exit_code": validation.exit_code,
        "agent": validation.agent,
        "baseline_agent": validation.baseline_agent,
        "check": validation.check,
        "reruns_per_trace": validation.n,
        "estimated_cost": {**validation.estimate.to_dict(), "max_cost": validation.max_cost},
        "live_model_calls": validation.live_calls,
        "incidents": [_incident(i) for i in validation.incidents],
        "golden": {
            "source": validation.golden_source,
            "cut": list(validation.golden_cut),
            "traces": len(validation.golden),
            "broken": len(validation.broken),
            "list": [_golden(g) for g in validation.golden],
        },
        "results_file": str(validation.results_file) if validation.results_file is not None else None,
    }


def summary_lines(validation: Validation) -> list[str]:
    """The validation for a reader: each incident's verdict and rates, the golden slice, the verdict."""
    lines = [
        f"validate {validation.agent} (new) against {validation.baseline_agent} (baseline): "
        f"{len(validation.incidents)} incident(s), {validation.n} rerun(s) each per agent",
        f"  check: {validation.check}",
    ]
    if validation.estimate.calls:
        lines.append(f"  {validation.estimate} (the reruns made {validation.live_calls})")
    for incident in validation.incidents:
        where = f"its finding: {incident.finding}" if incident.cut_from == "finding" else "--live"
        lines += [
            f"incident {incident.trace_id}: {incident.verdict}",
            f"  cut at {', '.join(incident.cut)} (from {where})",
            f"  new (must pass)      {incident.new.rate:<22}{_note(incident.new)}",
            f"  baseline (must fail) {incident.old.rate:<22}{_note(incident.old)}",
        ]
    lines += _golden_lines(validation)
    lines.append(f"verdict: {validation.verdict}")
    if validation.results_file is not None:
        lines.append(f"results: {validation.results_file}")
    return lines


def _note(reruns: Reruns) -> str:
    if reruns.passed < reruns.n:
        return f"fails: {reruns.failure}"
    if reruns.diverged:
        return f"passes; the path diverged in {reruns.diverged}/{reruns.n} (reported, not a failure)"
    return "passes"


def _golden_lines(validation: Validation) -> list[str]:
    if not validation.golden:
        return [f"golden slice: {validation.golden_source}: no unrelated behaviour checked"]
    cut = ", ".join(validation.golden_cut) or "no boundary (recorded)"
    counts = {
        s: sum(g.status == s for g in validation.golden) for s in ("fixed", "unchanged", "fails with both")
    }
    lines = [
        f"golden slice: {validation.golden_source}, both agents cut at {cut}",
        f"  {len(validation.broken)} of {len(validation.golden)} broken; "
        + ", ".join(f"{n} {status}" for status, n in counts.items()),
    ]
    for trace in validation.broken:
        lines.append(f"  broken {trace.trace_id} ({trace.label or '-'}): {trace.reason}")
        first = trace.new_divergence or trace.new.first_divergence
        if first is not None:
            lines.append(f"    first divergence: {first}")
    return lines


def _row(
    validation: Validation,
    role: Role,
    sample: Sample,
    live: Sequence[str],
    result: RerunResult,
    run: CorpusRun,
    agents: dict[Role, str],
) -> dict[str, Any]:
    from tailcut.replay._results import result_row

    row = result_row(result, run)
    incident = next((i for i in validation.incidents if i.trace_id == run.trace_id), None)
    golden = next((g for g in validation.golden if g.trace_id == run.trace_id), None)
    passed = result.check_passed is True
    if sample == "golden" and golden is not None:
        verdict = golden.status
        if role == "new":
            passed = golden.rerun_passes(result)
    else:
        verdict = incident.verdict if incident is not None else ""
    finding = incident.finding if incident is not None and sample == "incident" else None
    row.update(
        passed=passed,
        baseline=sample == "golden",
        role=role,
        sample=sample,
        agent=agents[role],
        live=list(live),
        check_passed=result.check_passed,
        finding_category=finding.category if finding else None,
        finding_boundary=finding.boundary if finding else None,
        finding_layer=finding.layer if finding else None,
        verdict=verdict,
    )
    return row


def write_validation(
    validation: Validation,
    rows: Sequence[tuple[Role, Sample, tuple[str, ...], RerunResult, CorpusRun]],
    path: str | os.PathLike[str],
) -> Path:
    """Write every rerun of ``validation`` to ``path`` (``validate_results``), whole or not at all.

    ``passed`` is the validation's judgement of the rerun: its check passed, and for the new agent on a
    golden trace (:meth:`~tailcut.replay._validate.GoldenResult.rerun_passes`), it kept the behaviour.

    Raises
    ------
    ReplayError
        If the file cannot be written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tailcut._atomic import replacing
    from tailcut.exporters import schema

    target = Path(path)
    agents: dict[Role, str] = {"new": validation.agent, "baseline": validation.baseline_agent}
    table = pa.Table.from_pylist(
        [_row(validation, *row, agents) for row in rows], schema=schema.VALIDATE_RESULTS
    )
    summary = validation_dict(validation) | {"results_file": str(target)}
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), SUMMARY_KEY: json.dumps(summary).encode()}
    )
    try:
        with replacing(target) as temporary:
            pq.write_table(table, temporary, compression="zstd")
    except OSError as exc:
        raise ReplayError(f"cannot write validation results to {target}: {exc.strerror or exc}") from None
    return target
