"""Cost, session and user: the pricing table, ``cost_usd`` and the id columns on spans and traces rows.

The writers (embedded exporter, ``tailcut ingest``) and the collector each build the ``traces`` row, the
collector for dropped traces too; both are exercised through their real paths here.
"""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tailcut.cli import cli
from tailcut.collector._facts import model_pricer, trace_cost_usd
from tailcut.collector._signals import span_records, tally_of
from tailcut.errors import ConfigError
from tailcut.exporters import compute_signals, facts_from_otlp
from tailcut.exporters._normalize import _cost_column
from tailcut.exporters._pricing import PRICING_ENV, default_pricing, load_pricing
from tests.analysis_support import fleet_data, split_in_two
from tests.test_collector_helpers import export_request, post, rows, span, start_collector

PRICED = {"gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6), "claude-sonnet-4": (3.0, 15.0)}
UNPRICED = ("scripted-support-1", "my-own-model", "gpt-4")


# --- the table -----------------------------------------------------------------------------------------


def test_the_packaged_table_has_a_date_and_current_models_of_both_providers():
    pricing = load_pricing()
    assert pricing.as_of and pricing.as_of[:4].isdigit()
    for model, price in PRICED.items():
        assert pricing.price(model) == price
    assert any(m.startswith("gpt-") for m in pricing.models)
    assert any(m.startswith("claude-") for m in pricing.models)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),  # dated snapshot
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # the longest prefix, not gpt-4o
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("openai/GPT-4o", "gpt-4o"),  # provider prefix, case
    ],
)
def test_snapshots_and_prefixed_names_take_their_model_s_price(model, expected):
    pricing = load_pricing()
    assert pricing.price(model) == pricing.models[expected]


@pytest.mark.parametrize("model", [*UNPRICED, "gpt-4ox", "", None])
def test_unknown_models_have_no_cost_never_zero(model):
    pricing = load_pricing()
    assert pricing.price(model) is None
    assert pricing.cost(model, 1000, 1000) is None


def test_cost_is_tokens_times_the_per_million_price():
    assert load_pricing().cost("gpt-4o", 1_000_000, 100_000) == pytest.approx(2.5 + 1.0)
    assert load_pricing().cost("gpt-4o", None, None) == 0.0  # priced model, no counts recorded


def test_a_user_file_replaces_and_adds_entries(tmp_path):
    user = tmp_path / "prices.toml"
    user.write_text(
        'as_of = "2030-01-01"\n[models."gpt-4o"]\ninput = 1\noutput = 2\n[models."my-own-model"]\n'
        "input = 0.5\noutput = 0.5\n"
    )
    pricing = load_pricing(user)
    assert pricing.as_of == "2030-01-01"
    assert pricing.price("gpt-4o") == (1.0, 2.0)
    assert pricing.price("my-own-model") == (0.5, 0.5)
    assert pricing.price("claude-sonnet-4") == PRICED["claude-sonnet-4"]  # the rest stays


def test_the_environment_names_the_user_file(tmp_path, monkeypatch):
    user = tmp_path / "prices.toml"
    user.write_text('[models."scripted-support-1"]\ninput = 1\noutput = 1\n')
    monkeypatch.setenv(PRICING_ENV, str(user))
    assert default_pricing().price("scripted-support-1") == (1.0, 1.0)
    monkeypatch.delenv(PRICING_ENV)
    assert default_pricing().price("scripted-support-1") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models = [", "not a valid TOML pricing file"),
        ('[models."m"]\ninput = -1\noutput = 1\n', "non-negative number"),
        ('[models."m"]\ninput = "cheap"\noutput = 1\n', "non-negative number"),
        ('[models."m"]\ninput = nan\noutput = 1\n', "non-negative number"),
        ('[models."m"]\noutput = 1\n', "models.'m'.input"),
        ('models = "all free"\n', "'models' must be a table"),
        ("[models]\nm = 3\n", "must be a table with input and output"),
    ],
)
def test_a_bad_user_file_is_one_config_error(tmp_path, text, message):
    user = tmp_path / "prices.toml"
    user.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_pricing(user)
    assert "\n" not in str(caught.value)


def test_a_missing_user_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the pricing file"):
        load_pricing(tmp_path / "absent.toml")


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([*PRICED, *UNPRICED]),
    st.integers(0, 10**7),
    st.integers(0, 10**7),
)
def test_cost_is_null_exactly_for_unpriced_models_and_monotone_in_tokens(model, tokens_in, tokens_out):
    pricing = load_pricing()
    cost = pricing.cost(model, tokens_in, tokens_out)
    assert (cost is None) == (model in UNPRICED)
    if cost is not None:
        assert cost >= 0 and math.isfinite(cost)
        assert pricing.cost(model, tokens_in + 1, tokens_out) >= cost


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["llm", "tool"]),
            st.sampled_from([*PRICED, *UNPRICED, "openai/GPT-4o-2024-08-06", "", None]),
            st.none() | st.integers(-(2**63), 2**63 - 1),
            st.none() | st.integers(0, 10**7),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_cost_column_is_each_llm_span_s_cost_bit_for_bit(spans):
    """The spans table's ``cost_usd`` (priced on arrays) is :meth:`Pricing.cost` of each ``llm`` span."""
    kinds, models, inputs, outputs = (list(column) for column in zip(*spans, strict=True))
    data = {
        "kind": pa.array(kinds, pa.string()),
        "model": pa.array(models, pa.string()),
        "input_tokens": pa.array(inputs, pa.int64()),
        "output_tokens": pa.array(outputs, pa.int64()),
    }
    pricing = default_pricing()
    expected = [pricing.cost(m, i, o) if k == "llm" else None for k, m, i, o in spans]
    assert _cost_column(data).to_pylist() == expected


# --- the collector and the writers agree ---------------------------------------------------------------

TRACE = b"\x01" * 16


@st.composite
def priced_traces(draw) -> list[Span]:
    """A root and llm spans (some nested in another llm span) with drawn models and token counts."""
    root = span(TRACE, b"\x10" * 8, name="run", tailcut__kind="root", session__id="s-1", user__id="u-1")
    spans = [root]
    for i in range(draw(st.integers(0, 6))):
        parent = draw(st.sampled_from(spans)).span_id
        model = draw(st.sampled_from([*PRICED, *UNPRICED]))
        spans.append(
            span(
                TRACE,
                bytes([i + 1]) * 8,
                parent,
                name=f"chat {model}",
                gen_ai__operation__name="chat",
                gen_ai__request__model=model,
                gen_ai__usage__input_tokens=draw(st.integers(0, 10**6)),
                gen_ai__usage__output_tokens=draw(st.integers(0, 10**5)),
            )
        )
    return draw(st.permutations(spans))


@settings(max_examples=150, deadline=None)
@given(priced_traces())
def test_collector_and_writers_price_a_trace_alike(spans):
    datas = [s.SerializeToString() for s in spans]
    writers = compute_signals(facts_from_otlp(s, "svc") for s in spans)
    collector = trace_cost_usd(span_records(datas))
    assert tally_of(datas).signals(datas, model_pricer()).cost_usd == collector
    assert (collector is None) == (writers.cost_usd is None)
    if collector is not None:
        assert collector == pytest.approx(writers.cost_usd)
    assert (writers.session_id, writers.user_id, writers.conversation_id) == ("s-1", "u-1", None)


# --- end to end ----------------------------------------------------------------------------------------


def _trace(trace_id: bytes, model: str, *, error: bool = False) -> list[Span]:
    """A root carrying the three ids, an llm call of ``model`` (1000 in, 100 out) and one of gpt-4o."""
    root_id = trace_id[:8]
    ids = {"session__id": "sess-9", "user__id": "user-3", "gen_ai__conversation__id": "conv-5"}
    calls = [
        span(
            trace_id,
            bytes([n]) + root_id[1:],
            root_id,
            name="chat",
            tailcut__kind="llm",
            gen_ai__request__model=m,
            gen_ai__usage__input_tokens=1000,
            gen_ai__usage__output_tokens=100,
            **ids,
        )
        for n, m in ((1, model), (2, "gpt-4o"))
    ]
    return [*calls, span(trace_id, root_id, name="run", error=error, tailcut__kind="root", **ids)]


GPT_4O = (1000 * 2.5 + 100 * 10.0) / 1e6
MINI = (1000 * 0.15 + 100 * 0.6) / 1e6


def test_collector_rows_carry_cost_and_ids_for_kept_and_dropped_traces(tmp_path):
    keep_errors = [{"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}}]
    collector = start_collector(tmp_path, policies=keep_errors, decision_wait="100ms")
    try:
        kept, dropped, unknown = (bytes([n]) * 16 for n in (0x0A, 0x0B, 0x0C))
        body = [*_trace(kept, "gpt-4o-mini", error=True), *_trace(dropped, "gpt-4o-mini")]
        body += _trace(unknown, "scripted-support-1")
        assert post(collector.ports.http, export_request(body))[0] == 200
        assert collector.wait_idle(5)
    finally:
        collector.stop()
    found = {
        r["trace_id"]: r
        for r in rows(
            tmp_path / "data",
            "traces",
            "SELECT trace_id, kept, cost_usd, session_id, user_id, conversation_id FROM t",
        )
    }
    assert found[kept.hex()]["kept"] and not found[dropped.hex()]["kept"]
    for trace in (kept, dropped):
        row = found[trace.hex()]
        assert row["cost_usd"] == pytest.approx(GPT_4O + MINI)
        assert (row["session_id"], row["user_id"], row["conversation_id"]) == ("sess-9", "user-3", "conv-5")
    assert found[unknown.hex()]["cost_usd"] is None  # one unpriced call: the trace's cost is unknown
    spans = rows(tmp_path / "data", "spans", "SELECT kind, cost_usd, session_id FROM t ORDER BY span_index")
    llm = sorted(s["cost_usd"] for s in spans if s["kind"] == "llm")
    assert llm == [pytest.approx(MINI), pytest.approx(GPT_4O)]
    assert [s["cost_usd"] for s in spans if s["kind"] == "root"] == [None]
    assert {s["session_id"] for s in spans} == {"sess-9"}


def test_ingest_prices_with_the_user_file(tmp_path, monkeypatch):
    user = tmp_path / "prices.toml"
    user.write_text('[models."scripted-support-1"]\ninput = 1000\noutput = 0\n')
    monkeypatch.setenv(PRICING_ENV, str(user))
    source = tmp_path / "spans.pb"
    source.write_bytes(export_request(_trace(b"\x0d" * 16, "scripted-support-1")))
    result = CliRunner().invoke(cli, ["ingest", str(source), "--data", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    (row,) = rows(tmp_path / "data", "traces", "SELECT cost_usd, session_id, user_id FROM t")
    assert row["cost_usd"] == pytest.approx(1000 * 1000 / 1e6 + GPT_4O)
    assert (row["session_id"], row["user_id"]) == ("sess-9", "user-3")


# --- compare --by session_id ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """The demo fleet, its tickets split into two sessions, half of each session's traffic in the slice."""
    fleet = fleet_data(tmp_path_factory)
    path = tmp_path_factory.mktemp("sessions") / "data"
    return split_in_two(fleet, path, "session_id", ("sess-A", "sess-B"))


def test_compare_by_session_id(sessions):
    args = ["compare", "--data", str(sessions), "--by", "session_id"]
    result = CliRunner().invoke(cli, [*args, "sess-A", "sess-B", "--format", "json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["description"] == "session_id: sess-A → sess-B"
    assert (record["a"]["label"], record["b"]["label"]) == ("sess-A", "sess-B")
    assert record["a"]["traces"] > 0 and record["b"]["traces"] > 0
    wrong = CliRunner().invoke(cli, [*args, "sess-A", "sess-Z"])
    assert wrong.exit_code == 2 and "values present: sess-A, sess-B" in wrong.output  # issue 29


# --- files written before the columns existed ----------------------------------------------------------

NEW_COLUMNS = ("cost_usd", "session_id", "user_id", "conversation_id")


def _age(data, table: str) -> None:
    """Rewrite every ``table`` file of ``data`` without the new columns, as an older writer wrote them."""
    import pyarrow.parquet as pq

    for path in (data / table).glob("dt=*/*.parquet"):
        pq.write_table(pq.read_table(path).drop_columns(list(NEW_COLUMNS)), path)


def _ingest(tmp_path, name: str, trace_id: bytes, data) -> None:
    source = tmp_path / f"{name}.pb"
    source.write_bytes(export_request(_trace(trace_id, "gpt-4o-mini")))
    result = CliRunner().invoke(cli, ["ingest", str(source), "--data", str(data)])
    assert result.exit_code == 0, result.output


def test_old_files_read_with_null_costs_and_ids(tmp_path):
    from tailcut.analysis import Dataset

    data = tmp_path / "data"
    _ingest(tmp_path, "old", b"\x0e" * 16, data)
    _age(data, "traces")
    _age(data, "spans")
    query = "SELECT count(*) AS n, count(cost_usd) AS priced, count(session_id) AS sessions FROM {}"
    for table in ("traces", "spans"):
        assert Dataset(data).sql(query.format(table)).row(0) == (1 if table == "traces" else 3, 0, 0)
    _ingest(tmp_path, "new", b"\x0f" * 16, data)  # a newer file beside the old ones
    traces = Dataset(data).sql("SELECT trace_id, cost_usd, session_id FROM traces ORDER BY trace_id").rows()
    assert traces == [("0e" * 16, None, None), ("0f" * 16, pytest.approx(GPT_4O + MINI), "sess-9")]
