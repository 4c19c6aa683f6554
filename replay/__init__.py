"""Replay recorded agent runs: recorded, live and cut-point, with honest rates.

A corpus (``tailcut export-corpus`` or ``tailcut select``) holds recorded runs and every boundary
crossing of each. A :func:`session` replays one run around the agent under test; :func:`run_replay`
(``tailcut replay``) reruns a whole corpus n times, judges each rerun and reports each trace as a rate
with its denominator and its mode, e.g. ``intermittent 3/10 (live)``; :func:`validate` (``tailcut
validate``) tests a fix against incidents, the old code as its control, with one verdict.

Examples
--------
::

    from tailcut import replay

    report = replay.run_replay(
        "corpus", "tailcut.demo.fleet:agent_v2", mode="cut", live=["router:refund_guard"],
        reset="tailcut.demo.fleet:reset_desk", check="tailcut.demo.fleet:check_run", n=5,
    )
    print("\\n".join(report.summary_lines()))
    gate = replay.exit_status(report)          # 0 passed, 1 failed or diverged, 3 nothing replayed
    summary = replay.report_dict(report)       # the keys of tailcut replay --format json

    validation = replay.validate(                # tailcut validate: a fix against incidents
        "data", incidents=[trace_id], agent="tailcut.demo.fleet:agent_v2",
        baseline_agent="tailcut.demo.fleet:agent_v1", check="tailcut.demo.fleet:check_run",
        reset="tailcut.demo.fleet:reset_desk",
    )
    print(validation.verdict, validation.exit_code)    # resolved 0
"""

from tailcut.replay._corpus import Corpus, load_corpus
from tailcut.replay._divergence import DivergenceRecord
from tailcut.replay._modes import ReplayMode
from tailcut.replay._rates import rate_text, rate_word
from tailcut.replay._records import exit_status, report_dict
from tailcut.replay._rerun import Rerun
from tailcut.replay._runner import ReplayReport, run_replay
from tailcut.replay._session import ReplaySession, session
from tailcut.replay._validate import ValidateError, Validation, validate

__all__ = [
    "Corpus",
    "DivergenceRecord",
    "ReplayMode",
    "ReplayReport",
    "ReplaySession",
    "Rerun",
    "ValidateError",
    "Validation",
    "exit_status",
    "load_corpus",
    "rate_text",
    "rate_word",
    "report_dict",
    "run_replay",
    "session",
    "validate",
]
