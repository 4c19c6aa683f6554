"""Issue 28's table for third-party recordings: each framework recorded by its own instrumentor, replayed.

``python -m tests.frameworks.thirdparty_table [-n N] [FRAMEWORK/INSTRUMENTOR ...]`` records five scenario
runs of each framework with that instrumentor alone (no tailcut SDK in the agent's process) through a real
``tailcut collect`` against the scripted model server, exports them with ``tailcut export-corpus`` and
replays them with ``tailcut replay`` in recorded mode, strict, without ``--relax``, the model server
forbidden. It prints one Markdown row per pair: exit code, passing traces / traces, and the first thing
the replay said (a divergence, what was not compared, or why a run could not be replayed).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from click.testing import CliRunner

from tailcut.cli import cli
from tests.frameworks import harness
from tests.frameworks._common import MODEL_URL_ENV

#: The five runs recorded per framework (each supported by every framework here).
SCENARIOS = ("clean", "tool_raises_caught", "tool_http_429", "unexpected_argument", "repeated_call")
#: (framework, instrumentor) pairs of the table, in its order.
PAIRS = (
    ("langgraph", "openinference"),
    ("langgraph", "openllmetry"),
    ("smolagents", "openinference"),
    ("smolagents_code", "openinference"),
    ("openai_agents", "openinference"),
)
NAMES = {
    "langgraph": "LangGraph",
    "smolagents": "smolagents",
    "smolagents_code": "smolagents CodeAgent",
    "openai_agents": "OpenAI Agents SDK",
    "llamaindex": "LlamaIndex",
    "openinference": "OpenInference",
    "openllmetry": "OpenLLMetry",
}


def replay_json(corpus: Path, framework: str, *args: str) -> tuple[int, dict, str]:
    """``tailcut replay CORPUS --format json`` of ``framework``'s agent: exit code, report, stderr."""
    command = ["replay", str(corpus), "--agent", harness.entry_point(framework), "--format", "json", *args]
    result = CliRunner().invoke(cli, command)
    return result.exit_code, json.loads(result.stdout), result.stderr


def said(report: dict) -> str:
    """What a reader needs from a replay report: the first divergence or failure (or why a trace was
    skipped, or the canary's word when it failed), then what was not compared."""
    traces = report.get("traces", [])
    failed = (t.get("first_divergence") or t.get("first_failure") for t in traces if not t["passed"])
    first = next(failed, None)
    skipped = next((s["reason"] for s in report.get("skipped", [])), None)
    canary = report.get("canary") or {}
    words = [str(first or skipped or (canary.get("detail") if canary.get("caught") is False else "") or "")]
    gaps = dict.fromkeys(entry for t in traces for entry in t.get("not_compared", []))
    if gaps:
        words.append("not compared: " + "; ".join(gaps))
    return "; ".join(w for w in words if w)


def measure(framework: str, instrumentor: str, directory: Path, server, n: int) -> dict:
    """Record, export and replay one pair; the row's figures."""
    reason = harness.missing(framework, instrumentor)
    if reason is not None:
        return {"exit": None, "passed": 0, "total": 0, "said": f"skipped: {reason}"}
    data = harness.record(framework, instrumentor, harness.runs(framework, SCENARIOS), directory, server)
    corpus = directory / "corpus"
    harness.export_corpus(data, corpus)
    with server.forbid():
        status, report, _ = replay_json(corpus, framework, "-n", str(n))
    traces = report.get("traces", [])
    passed = sum(1 for t in traces if t["passed"] == t["reruns"])
    total = len(traces) + len(report.get("skipped", []))
    return {
        "exit": status,
        "passed": passed,
        "total": total,
        "rates": sorted({t.get("rate") for t in traces}),
        "said": said(report),
        "violations": len(server.violations),
        "report": report,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="reruns per trace")
    parser.add_argument("pairs", nargs="*", help="FRAMEWORK/INSTRUMENTOR (default: the table's four)")
    parser.add_argument("--json", type=Path, help="also write every row (with the full report) here")
    parser.add_argument("--keep", type=Path, help="record into this directory, kept")
    options = parser.parse_args()
    pairs = [tuple(p.split("/")) for p in options.pairs] or list(PAIRS)
    harness.quiet_agents_sdk_tracing()
    rows = []
    server = harness.scenario_server()
    with server, tempfile.TemporaryDirectory() as temporary:
        scratch = options.keep or temporary
        os.environ[MODEL_URL_ENV] = server.openai_base_url
        print("| framework, instrumentor | replay | what it said |")
        print("|---|---|---|")
        for framework, instrumentor in pairs:
            directory = Path(scratch) / f"{framework}-{instrumentor}"
            row = measure(framework, instrumentor, directory, server, options.n)
            rows.append({"framework": framework, "instrumentor": instrumentor, **row})
            name = f"{NAMES.get(framework, framework)}, {NAMES.get(instrumentor, instrumentor)}"
            verdict = f"exit {row['exit']}, {row['passed']}/{row['total']}"
            print(f"| {name} | {verdict} | {row['said'][:400]} |", flush=True)
    if options.json:
        options.json.write_text(json.dumps(rows, indent=2, default=str))


if __name__ == "__main__":
    main()
