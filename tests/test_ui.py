"""`tailcut ui` without a browser: payload rendering, diffs, URL parsing, the token, routes and the CLI.

Routes are exercised through Starlette's test client over a real data dir in ``tmp_path`` (Parquet
written by the data-dir writer, classified by the real classifier); the browser tests are in
``test_ui_browser.py``.
"""

from __future__ import annotations

import hashlib
import json

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tailcut.canonical import canonical_json
from tailcut.cli import cli
from tailcut.exporters import DataDirWriter, PayloadStore, compute_signals, facts_from_row, traces_row
from tailcut.exporters.conventions.readable import offending_arguments, readable
from tailcut.payloads import make_stub
from tailcut.replay._diff import unified_diff
from tailcut.ui import BadRequest, Viewer, create_app
from tailcut.ui._auth import COOKIE, is_loopback
from tailcut.ui._replays import side_by_side
from tailcut.ui._traces import FILTER_NAMES, TraceQuery
from tests.analysis_support import spans_table

TRACE = "a" * 32
DROPPED = "d" * 32
BIG = "x" * 70_000


def _request(messages, tools=None) -> str:
    return canonical_json({"model": "m", "messages": messages, **({"tools": tools} if tools else {})})


# ------------------------------------------------------------------------------------------ readable payloads


def test_openai_request_and_response_render_as_messages_and_tool_calls():
    request = readable(
        _request(
            [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "where is 7?"}]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"status":"shipped"}'},
            ]
        )
    )
    assert [m.role for m in request] == ["system", "user", "tool"]
    with_tools = readable(_request([{"role": "user", "content": "hi"}], [{"function": {"name": "lookup"}}]))
    assert with_tools[-1].role == "tools" and with_tools[-1].texts == ["lookup"]
    assert request[1].texts == ["where is 7?"]
    assert request[2].tool_result_id == "c1"
    assert json.loads(request[2].tool_result) == {"status": "shipped"}
    response = readable(
        canonical_json(
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "c2",
                                    "function": {"name": "lookup", "arguments": '{"order_id":"ORD-7"}'},
                                }
                            ],
                        }
                    }
                ]
            }
        )
    )
    (call,) = response[0].tool_calls
    assert (call.name, call.id, call.arguments) == ("lookup", "c2", {"order_id": "ORD-7"})
    assert call.argument_items() == [("order_id", '"ORD-7"')]  # the quotes show it is a string


def test_anthropic_and_genai_shapes_render_the_same_way():
    anthropic = readable(
        canonical_json(
            {
                "system": "be brief",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "s", "input": {"q": 1}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
                    },
                ],
            }
        )
    )
    assert [m.role for m in anthropic] == ["system", "user", "assistant", "user"]
    assert anthropic[2].tool_calls[0].arguments == {"q": 1}
    assert anthropic[3].tool_result == "ok"
    genai = readable(
        canonical_json(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "tool_call", "name": "s", "id": "t", "arguments": {"q": 2}}],
                }
            ]
        )
    )
    assert genai[0].tool_calls[0].arguments == {"q": 2}


def test_arguments_that_are_not_json_and_payloads_that_are_not_chat():
    broken = readable(
        canonical_json(
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
                        }
                    }
                ]
            }
        )
    )
    call = broken[0].tool_calls[0]
    assert not call.arguments_are_json and call.argument_items() == [] and call.raw_arguments == "{oops"
    (plain,) = readable('{"order_id":7}')
    assert plain.role == "json" and json.loads(plain.json) == {"order_id": 7}
    assert readable("not json")[0].texts == ["not json"]
    assert readable(None) == []


def test_offending_arguments_are_read_from_the_evidence_for_that_tool():
    evidence = (
        "lookup_order: $.order_id: 'ORD-1' is not of type 'integer'; refund: $.amount: -1 is less than 0"
    )
    assert offending_arguments(evidence, "lookup_order") == {"order_id"}
    assert offending_arguments(evidence, "refund") == {"amount"}
    assert offending_arguments("lookup_order: $: 'order_id' is a required property", "lookup_order") == set()
    assert offending_arguments(evidence, "search_kb") == set()


def test_a_unified_diff_is_aligned_side_by_side():
    recorded = {"tools": [{"name": "ship", "required": ["address"]}], "model": "m"}
    live = {"tools": [{"name": "ship", "required": ["shipping_address"]}], "model": "m"}
    rows, labels = side_by_side(
        unified_diff(recorded, live, recorded_label="recorded x", live_label="live x")
    )
    assert labels == ("recorded x", "live x")
    (changed,) = [r for r in rows if r.kind == "changed"]
    assert changed.left.strip() == '"address"' and changed.right.strip() == '"shipping_address"'
    assert rows[0].kind == "hunk" and all(r.left == r.right for r in rows if r.kind == "same")


# ------------------------------------------------------------------------------------------------ URL params


def test_bad_parameters_are_refused_naming_the_choices():
    for params, message in (
        ({"sort": "price"}, "sort must be one of start, duration, tokens, cost"),
        ({"page": "0"}, "page must be between 1 and 10,000,000"),
        ({"page": "10000001"}, "page must be between 1 and 10,000,000"),
        ({"page": "x"}, "page must be a whole number"),
        ({"kept": "maybe"}, "kept must be yes or no"),
        ({"since": "yesterday"}, "since must be an ISO 8601 time"),
        ({"order": "up"}, "order must be asc or desc"),
    ):
        with pytest.raises(BadRequest, match=message):
            TraceQuery.from_params(params)


@given(st.dictionaries(st.sampled_from([*FILTER_NAMES, "sort", "order", "page"]), st.text(max_size=12)))
def test_any_query_string_parses_or_is_refused_and_a_parsed_one_round_trips(params):
    from urllib.parse import parse_qsl, urlsplit

    try:
        query = TraceQuery.from_params(params)
    except BadRequest:
        return
    again = TraceQuery.from_params(dict(parse_qsl(urlsplit(query.url()).query)))
    assert again == query


# ----------------------------------------------------------------------------------------- routes and token


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two traces: one kept (root, an LLM call whose tool call breaks the schema, a tool span with an
    offloaded request), one dropped (a traces row only)."""
    path = tmp_path_factory.mktemp("ui") / "data"
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "integer"}}},
            },
        }
    ]
    response = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "lookup_order", "arguments": '{"order_id":"ORD-1"}'},
                        }
                    ],
                },
            }
        ]
    }
    big = canonical_json({"query": BIG})
    sha = hashlib.sha256(big.encode()).hexdigest()
    PayloadStore(path / "payloads").put(big.encode(), sha)
    start = 1_790_000_000_000_000_000
    spans = spans_table(
        [
            {
                "trace_id": TRACE,
                "span_id": "1" * 16,
                "parent_span_id": None,
                "name": "run",
                "kind": "root",
                "start": start,
                "end": start + 10**9,
                "attributes": [
                    ("tailcut.run.input", canonical_json({"ticket": 42, "text": "where is   ORD-1?"})),
                    ("tailcut.run.output", canonical_json("ORD-1 has shipped")),
                ],
            },
            {
                "trace_id": TRACE,
                "span_id": "2" * 16,
                "parent_span_id": "1" * 16,
                "name": "chat m",
                "kind": "llm",
                "start": start + 10**6,
                "end": start + 10**8,
                "boundary": "llm:openai.chat",
                "occurrence": 1,
                "seq": 1,
                "request": _request([{"role": "user", "content": "where is ORD-1?"}], tools),
                "response": canonical_json(response),
            },
            {
                "trace_id": TRACE,
                "span_id": "3" * 16,
                "parent_span_id": "1" * 16,
                "name": "search",
                "kind": "tool",
                "start": start + 2 * 10**8,
                "end": start + 3 * 10**8,
                "boundary": "tool:search_kb",
                "occurrence": 1,
                "seq": 2,
                "request": orjson.dumps(make_stub(sha, len(big), big)).decode(),
                "response": BIG and '"ok"',
            },
        ]
    )
    kept = traces_row(
        compute_signals(facts_from_row(r) for r in spans.to_pylist()),
        kept=True,
        decision_reason="root_end",
        policies=["errors"],
    )
    kept["cost_usd"] = 0.000123456
    dropped = {**kept, "trace_id": DROPPED, "kept": False, "policies": [], "inclusion_probability": 0.05}
    with DataDirWriter(path) as writer:
        writer.write_spans(spans)
        writer.write_traces([kept, dropped])
    return path


@pytest.fixture(scope="module")
def viewer(data):
    viewer = Viewer(data)
    yield viewer
    viewer.close()


@pytest.fixture
def client(viewer):
    return TestClient(create_app(viewer))


def test_the_traces_page_counts_kept_of_seen_and_filters(client):
    page = client.get("/")
    assert page.status_code == 200 and "1 kept of 2 seen" in page.text
    kept = client.get("/", params={"kept": "no"})
    assert DROPPED in kept.text and f"/traces/{TRACE}" not in kept.text
    assert "0 kept of 1 seen" in kept.text
    assert client.get("/", params={"sort": "price"}).status_code == 400
    assert f"/traces/{TRACE}" in client.get("/", params={"sort": "cost"}).text  # unpriced traces sort last
    assert f"/traces/{TRACE}" in client.get("/", params={"q": "AAAA"}).text  # part of the id, any case
    assert "No trace matches" in client.get("/", params={"q": "bbbb"}).text
    assert "No trace matches" in client.get("/", params={"since": "2100-01-01"}).text
    assert f"/traces/{TRACE}" in client.get("/", params={"until": "2100-01-01", "policy": "errors"}).text
    assert DROPPED in client.get("/", params={"policy": "(none)"}).text
    past_the_end = client.get("/", params={"page": "9"})
    assert past_the_end.status_code == 200 and "of 2 · page 9 of 1" in past_the_end.text


def test_the_traces_page_shows_the_run_its_input_and_a_cost_that_tells_rows_apart(client):
    page = client.get("/").text
    assert '<td class="run">run<div class="preview" title="the run\'s input">' in page
    assert "{&#34;text&#34;:&#34;where is ORD-1?&#34;,&#34;ticket&#34;:42}" in page  # one line
    assert '<td class="num">0.000123</td>' in page
    start = page.split('<td class="when">')[1].split("</td>")[0]
    assert " " not in start and "\u00a0" in start  # a timestamp that does not wrap


def test_the_root_span_shows_the_run_input_and_output(client):
    root = client.get(f"/traces/{TRACE}/spans/{'1' * 16}").text
    assert 'data-part="run input"' in root and 'data-part="run output"' in root
    assert "ORD-1 has shipped" in root and "none recorded" not in root


def test_the_viewer_writes_nothing_into_the_data_dir(data, tmp_path):
    import shutil

    copy = tmp_path / "data"
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns("findings"))
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    viewer = Viewer(copy)
    try:
        assert viewer.rows("SELECT count(*) AS n FROM findings")[0]["n"] > 0
    finally:
        viewer.close()
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before


def test_a_sub_millisecond_span_at_the_end_keeps_a_visible_bar():
    from tailcut.ui._trace import MIN_BAR_PERCENT, timeline

    spans = [
        {"span_id": "r", "start_ns": 0, "end_ns": 10**9},
        {"span_id": "a", "start_ns": 10**9 - 1000, "end_ns": 10**9},
    ]
    rows, _ = timeline(spans, [])
    assert rows[1].width == MIN_BAR_PERCENT and rows[1].left + rows[1].width <= 100
    assert rows[1].left > 99


def test_a_divergence_every_rerun_repeats_is_listed_once_with_its_reruns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tailcut.ui._replays import load_results

    same = json.dumps({"kind": "request", "boundary": "llm:x", "occurrence": 1, "message": "prompt changed"})
    other = json.dumps({"kind": "extra", "boundary": "tool:y", "occurrence": 2, "message": "extra call"})
    rows = [
        {
            "trace_id": TRACE,
            "mode": "recorded",
            "rerun": i,
            "passed": False,
            "divergence": d,
            "divergence_count": 1,
        }
        for i, d in enumerate([same, same, other, same], start=1)
    ]
    path = tmp_path / "results.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    (trace,) = load_results(path).traces
    assert [(d.message, d.reruns) for d in trace.divergences] == [
        ("prompt changed", (1, 2, 4)),
        ("extra call", (3,)),
    ]
    assert trace.stored_divergences == trace.divergence_count == 4


def test_a_span_detail_marks_the_argument_and_defers_an_offloaded_payload(client, viewer):
    findings = viewer.rows("SELECT category, span_id FROM findings")
    assert {"category": "schema_violation", "span_id": "2" * 16} in findings
    llm = client.get(f"/traces/{TRACE}/spans/{'2' * 16}")
    assert llm.status_code == 200
    assert 'class="offending"><th>order_id</th><td><pre>&#34;ORD-1&#34;</pre>' in llm.text
    tool = client.get(f"/traces/{TRACE}/spans/{'3' * 16}")
    assert "load request" in tool.text and BIG not in tool.text
    loaded = client.get(f"/api/traces/{TRACE}/spans/{'3' * 16}/request")
    assert loaded.status_code == 200
    body = loaded.json()
    assert json.loads(body["raw"]) == {"query": BIG} and body["chars"] == len(canonical_json({"query": BIG}))
    assert BIG in body["html"]


def test_unknown_ids_are_404_pages_and_a_dropped_trace_says_its_spans_were_not_kept(client):
    missing = client.get(f"/traces/{'0' * 32}")
    assert missing.status_code == 404 and "What to do" in missing.text
    assert client.get(f"/traces/{TRACE}/spans/{'9' * 16}").status_code == 404
    assert client.get(f"/api/traces/{TRACE}/spans/{'2' * 16}/headers").status_code == 404
    assert client.get("/no/such/page").status_code == 404
    dropped = client.get(f"/traces/{DROPPED}")
    assert dropped.status_code == 200 and "its spans were not kept" in dropped.text


def test_compare_without_a_baseline_slice_says_why(client):
    page = client.get("/compare", params={"by": "service_name", "a": "x", "b": "y"})
    assert page.status_code == 400 and "no trace has service_name = &#39;x&#39;" in page.text


def test_with_a_token_every_request_needs_it(viewer):
    client = TestClient(create_app(viewer, token="s3cret"))
    refused = client.get("/")
    assert refused.status_code == 401 and "needs its token" in refused.text
    assert client.get("/static/ui.css").status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    first = client.get("/", params={"token": "s3cret"})
    assert first.status_code == 200 and first.cookies.get(COOKIE) == "s3cret"
    assert client.get(f"/traces/{TRACE}").status_code == 200  # the cookie carries it from now on


def test_a_loopback_viewer_answers_only_to_loopback_host_names(viewer):
    from tailcut.ui._auth import LOOPBACK_HOSTS

    client = TestClient(create_app(viewer, allowed_hosts=LOOPBACK_HOSTS))
    assert client.get("/", headers={"Host": "127.0.0.1:8765"}).status_code == 200
    assert client.get("/", headers={"Host": "attacker.example"}).status_code == 400


def test_loopback_hosts():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("example.invalid")


def test_the_cli_refuses_a_reachable_host_without_a_token_and_a_bad_results_file(data, tmp_path):
    runner = CliRunner()
    reachable = runner.invoke(cli, ["ui", "--data", str(data), "--host", "example.invalid"])
    assert reachable.exit_code == 2 and "give --token TOKEN (or set TAILCUT_UI_TOKEN)" in reachable.output
    bogus = tmp_path / "results.parquet"
    bogus.write_text("not parquet")
    bad = runner.invoke(cli, ["ui", "--data", str(data), "--results", str(bogus), "--port", "0"])
    assert bad.exit_code == 1 and "not a readable Parquet file" in bad.output
    assert "Traceback" not in bad.output
    nodata = runner.invoke(cli, ["ui", "--data", str(tmp_path / "none")])
    assert nodata.exit_code == 1 and "Traceback" not in nodata.output


@pytest.mark.filterwarnings("ignore:No artists with labels")  # the plots of a two-trace data dir
def test_the_html_report_links_its_traces_and_boundaries_to_the_viewer(data, tmp_path):
    out = tmp_path / "report.html"
    runner = CliRunner()
    done = runner.invoke(
        cli, ["report", "--data", str(data), "--html", str(out), "--ui-url", "http://127.0.0.1:8765/"]
    )
    assert done.exit_code == 0, done.output
    html = out.read_text()
    assert f"href='http://127.0.0.1:8765/traces/{TRACE}?span={'2' * 16}'" in html
    assert "href='http://127.0.0.1:8765/?category=schema_violation'" in html
    assert "href='http://127.0.0.1:8765/?boundary=llm%3Aopenai.chat'" in html
    without = runner.invoke(cli, ["report", "--data", str(data), "--ui-url", "http://127.0.0.1:8765/"])
    assert without.exit_code == 2 and "give --html FILE too" in without.output
    plain = tmp_path / "plain.html"
    assert runner.invoke(cli, ["report", "--data", str(data), "--html", str(plain)]).exit_code == 0
    assert "trace viewer" not in plain.read_text()


def test_a_damaged_file_in_the_data_dir_is_one_line_not_a_traceback(data, tmp_path):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(data, damaged)
    (next((damaged / "spans").iterdir()) / "part-zzzz.parquet").write_bytes(
        b"PAR1 this is not a parquet file"
    )
    done = CliRunner().invoke(cli, ["ui", "--data", str(damaged), "--port", "0"])
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert "part-zzzz.parquet" in done.output
