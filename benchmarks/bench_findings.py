"""Benchmark: are the findings right on real framework agents, and at the right span? (issue 27)

Records the scenario script of ``tests/frameworks`` (a clean run, a tool that raises, caught and fatal, tool
results carrying HTTP 429/403/404 texts, an unexpected argument, invalid JSON arguments, an unknown tool, an
unparseable output, a repeated call) for every framework with its OpenInference instrumentor (LangGraph
also with OpenLLMetry), each through a real ``tailcut collect``, classifies each data dir, and prints per
framework and category: recall and precision of the findings at the right span (the labelled span, its
parent or a child, with the label's sub-kind and layer), and the findings on clean runs. Goal: recall and
precision at least 0.9 for every category on every framework, no finding on a clean run. The scenarios'
labels are the ground truth (:mod:`tests.frameworks.scenarios`); nothing is timed. It also prints which
categories are census categories of each data dir (the collector's ``traces`` rows flag them on exactly
the traces with the finding, so ``compare`` counts them on every trace seen). Run::

    python benchmarks/bench_findings.py              # every framework, each scenario once
    python benchmarks/bench_findings.py --repeat 3   # each scenario three times
    python benchmarks/bench_findings.py --frameworks smolagents langgraph
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailcut.analysis import Dataset, _census
from tests import findings_scoring
from tests.frameworks import harness

CATEGORIES = ("error", "schema_violation", "tool_loop")
GOAL = 0.9


def _cell(value: float | None) -> str:
    return "   -" if value is None else f"{value:4.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each scenario")
    parser.add_argument("--frameworks", nargs="*", help="only these frameworks")
    args = parser.parse_args()
    pairs = [p for p in findings_scoring.PAIRS if not args.frameworks or p[0] in args.frameworks]
    total = findings_scoring.Score()
    census: dict[str, tuple[str, ...]] = {}
    lines = []
    met = True
    server = harness.scenario_server()
    with tempfile.TemporaryDirectory() as folder, server:
        for framework, recorder in pairs:
            reason = harness.missing(framework, recorder)
            if reason is not None:
                print(f"skipped {framework}/{recorder}: {reason}")
                continue
            directory = Path(folder, f"{framework}-{recorder}")
            data = harness.record(
                framework, recorder, harness.runs(framework, repeat=args.repeat), directory, server
            )
            dataset = Dataset(data)
            score = findings_scoring.score(data, dataset.classify(), recorder)
            census[f"{framework}/{recorder}"] = _census.build(dataset).categories
            total.add(score)
            cells = []
            for category in CATEGORIES:
                recall, precision = score.recall(category), score.precision(category)
                met &= all(v is None or v >= GOAL for v in (recall, precision))
                cells.append(f"{_cell(recall):>11s} {_cell(precision)}")
            met &= score.clean_findings == 0
            lines.append(
                f"{framework + '/' + recorder:30s} " + "   ".join(cells) + f"   {score.clean_findings:5d}"
            )
            for miss in score.misses:
                print(f"  miss  {miss}")
            for extra in score.extras:
                print(f"  extra {extra}")
    header = "   ".join(f"{c[:16]:>16s}" for c in CATEGORIES)  # each cell: recall, precision (16 wide)
    print()
    print(f"{'framework/recorder':30s} {header}   clean")
    print(f"{'':30s} " + "   ".join(f"{'recall prec':>16s}" for _ in CATEGORIES) + "   finds")
    for line in lines:
        print(line)
    cells = [f"{_cell(total.recall(c)):>11s} {_cell(total.precision(c))}" for c in CATEGORIES]
    print(f"{'all':30s} " + "   ".join(cells) + f"   {total.clean_findings:5d}")
    print(
        f"\ngoal: recall and precision >= {GOAL} for every category and framework, 0 on clean runs: "
        f"{'met' if met else 'NOT met'}"
    )
    print("\ncensus categories (counted on every trace seen):")
    for pair, categories in census.items():
        print(f"  {pair:30s} {', '.join(categories)}")
    for key, why in findings_scoring.KNOWN_GAPS.items():
        if key[:2] in pairs:
            print(f"known gap {'/'.join(key)}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
