"""Benchmark: `tailcut ui` server time per page against the one DuckDB query the page needs.

Goal (issue 16): on the 1M-span benchmark data dir, each of the first traces page, a filtered traces
page and the page of a 200-span trace is served in at most 3x the time of the DuckDB query behind it,
both measured here in the same run. The data dir is ``bench_analysis.py``'s (support-agent traces, a 5%
baseline slice, every failure category) plus one trace of 200 spans. The pages are fetched over HTTP
from the real server (uvicorn on loopback, in this process); the query is run on the viewer's own
connection with the same SQL and parameters. Run::

    python benchmarks/bench_ui.py                 # ~1M spans
    python benchmarks/bench_ui.py --spans 100000  # a quick run
    python benchmarks/bench_ui.py --keep /tmp/ui-bench   # build once, reuse on the next run
"""

from __future__ import annotations

import argparse
import http.client
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn

sys.path.insert(0, str(Path(__file__).parent))
from bench_analysis import base, build, llm, template_table, timed, tool, traces_rows

from tailcut import attributes as attr
from tailcut.exporters import DataDirWriter
from tailcut.ui import Viewer, _trace, _traces, create_app

BIG_TRACE = "20020020020020020020020020020020"
GOAL = 3.0


def add_big_trace(path: Path) -> None:
    """One kept trace of 200 spans: root, agent, memory, retriever and 98 LLM/tool call pairs."""
    spans = base({attr.OUTCOME: "pass"})
    for turn in range(98):
        spans.append(
            llm(1, "new", turn, lambda o, t=turn: f'{{"choices":[{{"message":{{"content":"{t}"}}}}]}}')
        )
        spans.append(tool(1, "search_kb", lambda o: {"query": "where"}))
    assert len(spans) == 200
    table = template_table(spans, [BIG_TRACE], 10**7, np.random.default_rng(1))
    with DataDirWriter(path) as writer:
        writer.write_spans(table)
        writer.write_traces(traces_rows(table, "normal", np.array([True]), 0.05))


class Server:
    """The viewer's app under uvicorn on an ephemeral loopback port, in a thread."""

    def __init__(self, viewer: Viewer) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        config = uvicorn.Config(create_app(viewer), log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def get(self, path: str) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        connection.close()
        assert response.status == 200, (path, response.status, body[:300])
        return body

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.socket.close()


def compare(name: str, page: Callable[[], Any], query: Callable[[], Any], repeat: int) -> float:
    page_time, _ = timed(page, repeat)
    query_time, _ = timed(query, repeat)
    ratio = page_time / query_time
    print(f"{name:<34} page {page_time * 1000:8.1f} ms   query {query_time * 1000:8.1f} ms   {ratio:5.2f} x")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans to generate (default 1M)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (median)")
    parser.add_argument(
        "--keep", type=Path, help="build the data dir here, or reuse the one an earlier run built there"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = options.keep or Path(scratch) / "data"
        if (path / "traces").is_dir():
            print(f"reusing the data dir at {path}")
        else:
            start = time.perf_counter()
            traces, spans = build(path, options.spans)
            add_big_trace(path)
            print(
                f"built {spans + 200:,} spans in {traces + 1:,} traces in {time.perf_counter() - start:.1f} s"
            )
        start = time.perf_counter()
        viewer = Viewer(path)
        print(f"viewer opened (classification included) in {time.perf_counter() - start:.1f} s")
        connection = viewer.dataset.connection

        def query(sql: str, params: dict[str, Any]) -> Callable[[], Any]:
            return lambda: connection.execute(sql, params).fetchall()

        first = _traces.TraceQuery()
        filtered = _traces.TraceQuery.from_params(
            {"category": "schema_violation", "kept": "yes", "sort": "tokens"}
        )
        ratios = {}
        with Server(viewer) as server:
            server.get("/")  # warm the templates
            ratios["first traces page"] = compare(
                "first traces page (/)",
                lambda: server.get("/"),
                query(*_traces.page_sql(first)),
                options.repeat,
            )
            ratios["filtered traces page"] = compare(
                "filtered page (category, kept)",
                lambda: server.get(filtered.url()),
                query(*_traces.page_sql(filtered)),
                options.repeat,
            )
            ratios["200-span trace page"] = compare(
                "200-span trace page",
                lambda: server.get(f"/traces/{BIG_TRACE}"),
                query(_trace.SPANS_SQL, {"trace": BIG_TRACE}),
                options.repeat,
            )
            assert server.get(f"/traces/{BIG_TRACE}").count(b'class="wf-row') == 200
        viewer.close()
        worst = max(ratios, key=lambda k: ratios[k])
        verdict = "met" if ratios[worst] <= GOAL else "NOT met"
        print(f"worst: {worst} {ratios[worst]:.2f} x (goal <= {GOAL:.0f} x: {verdict})")


if __name__ == "__main__":
    main()
