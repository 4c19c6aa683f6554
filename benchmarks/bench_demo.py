"""Wall time of each stage of ``tailcut demo`` and its share of the whole, so the slowest is visible.

No absolute goal: the demo at its default size must finish within about two minutes on a 2-core machine.

Run: ``python benchmarks/bench_demo.py [--runs N]``
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

from rich.console import Console

from tailcut.demo.run import DEFAULT_RUNS, DemoOptions, run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    args = parser.parse_args()
    console = Console(width=110)
    quiet = Console(file=io.StringIO(), width=110)  # the demo's own output is not the point here
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        result = run_demo(DemoOptions(runs=args.runs, out=Path(scratch) / "demo"), quiet)
        wall = time.perf_counter() - start
    console.print(result.details["timings"].table())
    slowest = max(result.details["timings"].seconds.items(), key=lambda item: item[1])
    console.print(
        f"demo wall time {wall:.1f} s for {args.runs} runs; slowest stage: {slowest[0]} ({slowest[1]:.1f} s)"
    )


if __name__ == "__main__":
    main()
