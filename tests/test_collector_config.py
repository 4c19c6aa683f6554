"""The collector config: the default file, every policy type, and one-line errors naming the key path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from tailcut.cli import cli
from tailcut.collector import load_config
from tailcut.collector._config import default_config_text, parse_config
from tailcut.collector._durations import parse_duration
from tailcut.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]

ALL_POLICIES = """
- {name: all, type: always_sample}
- {name: slow, type: latency, latency: {threshold_ms: 100, upper_threshold_ms: 5000}}
- {name: num, type: numeric_attribute, numeric_attribute: {key: k1, min_value: 2.5, invert_match: true}}
- {name: prob, type: probabilistic, probabilistic: {sampling_percentage: 12.5, hash_salt: s}}
- {name: status, type: status_code, status_code: {status_codes: [ERROR, UNSET]}}
- {name: str, type: string_attribute, string_attribute: {key: k2, values: ["a.*"],
   enabled_regex_matching: true, cache_max_size: 10, invert_match: false}}
- {name: rate, type: rate_limiting, rate_limiting: {spans_per_second: 100}}
- {name: count, type: span_count, span_count: {min_spans: 2, max_spans: 20}}
- {name: flag, type: boolean_attribute, boolean_attribute: {key: k3, value: true}}
- {name: both, type: and, and: {and_sub_policy: [{name: a1, type: always_sample},
   {name: a2, type: not, not: {not_sub_policy: {name: n1, type: status_code,
                                                status_code: {status_codes: [OK]}}}}]}}
- {name: neither, type: not, not: {not_sub_policy: {name: n2, type: span_count, span_count: {min_spans: 1}}}}
- {name: veto, type: drop, drop: {drop_sub_policy: [{name: d1, type: string_attribute,
   string_attribute: {key: http.route, values: [/health]}}]}}
- {name: comp, type: composite, composite: {max_total_spans_per_second: 1000, policy_order: [c1, c2],
   composite_sub_policy: [{name: c1, type: always_sample},
                          {name: c2, type: span_count, span_count: {min_spans: 1}}],
   rate_allocation: [{policy: c1, percent: 50}, {policy: c2, percent: 25}]}}
"""


def config_with(policies: str = "- {name: all, type: always_sample}", **tail_sampling: object) -> dict:
    document = yaml.safe_load(default_config_text())
    document["processors"]["tail_sampling"]["policies"] = yaml.safe_load(policies)
    document["processors"]["tail_sampling"].update(tail_sampling)
    return document


def error_of(document: dict) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_config(yaml.safe_dump(document))
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_default_config_loads_with_the_issue_policy_set():
    config = load_config()
    names = {p.name: p for p in config.tail_sampling.build_policies()}
    assert list(names) == [
        "errors",
        "schema-violations",
        "tool-loops",
        "anomalies",
        "slow",
        "bad-outcome",
        "baseline",
    ]
    assert names["anomalies"].min_value == 3.5
    assert names["tool-loops"].min_value == 3
    assert names["baseline"].ratio == 0.05
    assert config.http is not None and (config.http.host, config.http.port) == ("127.0.0.1", 4318)
    assert config.grpc is not None and (config.grpc.host, config.grpc.port) == ("127.0.0.1", 4317)
    assert config.tail_sampling.decision_wait_after_root_received == 6.0


def test_packaged_config_is_the_repository_config():
    assert (REPO / "otel-config.yaml").read_text("utf-8") == default_config_text()
    assert (REPO / "collector" / "otel-config.yaml").read_bytes() == (REPO / "otel-config.yaml").read_bytes()


def test_every_policy_type_parses():
    config = parse_config(yaml.safe_dump(config_with(ALL_POLICIES)))
    policies = config.tail_sampling.build_policies()
    assert [p.type_name for p in policies] == [
        "always_sample",
        "latency",
        "numeric_attribute",
        "probabilistic",
        "status_code",
        "string_attribute",
        "rate_limiting",
        "span_count",
        "boolean_attribute",
        "and",
        "not",
        "drop",
        "composite",
    ]
    composite = policies[-1]
    assert composite.allocations == [500.0, 250.0]


def test_collector_keys_are_read():
    config = parse_config(
        yaml.safe_dump(
            config_with(
                decision_wait="1m30s",
                decision_wait_after_root_received="500ms",
                num_traces=10,
                block_on_overflow=True,
                sample_on_first_match=True,
                decision_cache={"sampled_cache_size": 7, "non_sampled_cache_size": 9},
            )
        )
    )
    ts = config.tail_sampling
    assert (ts.decision_wait, ts.decision_wait_after_root_received, ts.num_traces) == (90.0, 0.5, 10)
    assert (ts.sampled_cache_size, ts.non_sampled_cache_size) == (7, 9)
    assert ts.block_on_overflow and ts.sample_on_first_match


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d["processors"]["tail_sampling"]["policies"].append(
                {"name": "x", "type": "latency", "latency": {"threshold_ms": "fast"}}
            ),
            "processors.tail_sampling.policies[7].latency.threshold_ms: expected a positive integer, got"
            ' "fast"',
        ),
        (
            lambda d: d["processors"]["tail_sampling"].update(num_trace=5),
            "processors.tail_sampling.num_trace: unknown key; allowed: decision_wait,",
        ),
        (
            lambda d: d["processors"]["tail_sampling"].update(decision_wait="10"),
            "processors.tail_sampling.decision_wait: expected a positive duration",
        ),
        (
            lambda d: d["processors"]["tail_sampling"].update(num_traces=0),
            "processors.tail_sampling.num_traces: expected a positive integer, got 0",
        ),
        (
            lambda d: d["processors"]["tail_sampling"]["policies"][0].update(type="sometimes"),
            "processors.tail_sampling.policies[0].type: expected one of always_sample, latency,",
        ),
        (
            lambda d: d["processors"]["tail_sampling"]["policies"][0].update(latency={"threshold_ms": 5}),
            "processors.tail_sampling.policies[0].latency: unknown key; allowed: name, type, status_code",
        ),
        (
            lambda d: d["processors"]["tail_sampling"]["policies"][6]["probabilistic"].update(
                sampling_percentage=150
            ),
            "processors.tail_sampling.policies[6].probabilistic.sampling_percentage: expected a number from"
            " 0 to 100",
        ),
        (
            lambda d: d["processors"]["tail_sampling"]["policies"][0]["status_code"].update(
                status_codes=["BAD"]
            ),
            "processors.tail_sampling.policies[0].status_code.status_codes[0]: expected one of UNSET, OK,"
            ' ERROR, got "BAD"',
        ),
        (
            lambda d: d["processors"]["tail_sampling"]["policies"][5]["string_attribute"].update(
                values=["("], enabled_regex_matching=True
            ),
            "processors.tail_sampling.policies[5].string_attribute.values[0]: expected a valid regular"
            " expression",
        ),
        (
            lambda d: d["processors"]["tail_sampling"]["policies"][1].update(name="errors"),
            "processors.tail_sampling.policies[1].name: expected a name not used by another policy in this"
            ' list, got "errors"',
        ),
        (
            lambda d: d["processors"]["tail_sampling"]["policies"][1]["numeric_attribute"].pop("min_value"),
            "processors.tail_sampling.policies[1].numeric_attribute: set min_value, max_value or both",
        ),
        (
            lambda d: d["processors"]["tail_sampling"].pop("policies"),
            "processors.tail_sampling.policies: required key is missing",
        ),
        (
            lambda d: d["receivers"]["otlp"]["protocols"]["http"].update(endpoint="localhost"),
            "receivers.otlp.protocols.http.endpoint: expected HOST:PORT, e.g. 127.0.0.1:4318, got"
            ' "localhost"',
        ),
        (
            lambda d: d["exporters"].update(kafka={}),
            "exporters.kafka: unknown exporter; allowed: tailcut_parquet[/NAME], otlphttp[/NAME],"
            " otlp[/NAME]",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces"].update(exporters=["otlphttp/missing"]),
            "service.pipelines.traces.exporters[0]: expected an exporter defined under exporters"
            ' (tailcut_parquet), got "otlphttp/missing"',
        ),
        (
            lambda d: d["service"]["pipelines"]["traces"].update(processors=["tail_sampling", "tailcut"]),
            'service.pipelines.traces.processors: "tailcut" computes the trace signals the policies read,'
            ' so it must come before "tail_sampling"',
        ),
        (
            lambda d: d["processors"]["tailcut"].update(anomaly_min_window=500),
            "processors.tailcut.anomaly_min_window: expected a positive integer <= anomaly_window (200),"
            " got 500",
        ),
        (
            lambda d: d["processors"]["tailcut"].update(late_span_window=True),
            "processors.tailcut.late_span_window: expected a duration such as 10s, 500ms, 1m or 1h30m, got"
            " true",
        ),
    ],
)
def test_each_class_of_bad_config_fails_with_the_key_path(change, expected):
    document = yaml.safe_load(default_config_text())
    change(document)
    assert error_of(document).startswith(expected)


def test_nested_policy_errors_name_the_nested_path():
    document = config_with(
        "- {name: c, type: composite, composite: {max_total_spans_per_second: 10, policy_order: [a],"
        " composite_sub_policy: [{name: a, type: span_count, span_count: {min_spans: -1}}]}}"
    )
    assert error_of(document) == (
        "processors.tail_sampling.policies[0].composite.composite_sub_policy[0].span_count.min_spans:"
        " expected a non-negative integer, got -1"
    )
    document = config_with(
        "- {name: d, type: and, and: {and_sub_policy: [{name: x, type: drop, drop: {drop_sub_policy: []}}]}}"
    )
    assert "policies[0].and.and_sub_policy[0].type: expected one of" in error_of(document)


def test_file_problems_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: "):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("receivers:\n  otlp: [\n")
    with pytest.raises(ConfigError, match=r"broken.yaml: invalid YAML at line \d+, column \d+"):
        load_config(broken)


def test_overrides_replace_data_dir_and_endpoints(tmp_path):
    config = load_config(
        None, {"data": tmp_path, "http": "127.0.0.1:0", "grpc": False, "metrics": "127.0.0.1:9"}
    )
    assert config.parquet is not None and config.parquet.path == str(tmp_path)
    assert config.http is not None and config.http.port == 0
    assert config.grpc is None
    assert config.metrics == ("127.0.0.1", 9)
    with pytest.raises(ConfigError, match="--http: expected HOST:PORT"):
        load_config(None, {"http": "nowhere"})


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(["ns", "us", "µs", "ms", "s", "m", "h"])),
        min_size=1,
        max_size=4,
    )
)
def test_durations_sum_their_terms(terms):
    seconds = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    text = "".join(f"{n}{unit}" for n, unit in terms)
    assert parse_duration(text) == pytest.approx(sum(n * seconds[u] for n, u in terms))


@pytest.mark.parametrize("text", ["10", "1x", "s", "", "1.5.5s", "10 s"])
def test_durations_refuse_what_go_refuses(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_check_prints_what_the_config_sets_up(tmp_path):
    result = CliRunner().invoke(cli, ["collect", "--check", "--data", str(tmp_path), "--no-grpc"])
    assert result.exit_code == 0, result.output
    assert "receivers: otlp/http 127.0.0.1:4318\n" in result.output
    assert "  anomalies (numeric_attribute): tailcut.trace.anomaly_score >= 3.5\n" in result.output
    assert f"exporters: tailcut_parquet -> {tmp_path}\n" in result.output


def test_check_reports_a_bad_config_in_one_line_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    document = yaml.safe_load(default_config_text())
    document["processors"]["tail_sampling"]["decision_wait"] = "soon"
    bad.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(cli, ["collect", "--config", str(bad), "--check"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: processors.tail_sampling.decision_wait: expected a positive duration (a duration such as 10s,"
        ' 500ms, 1m or 1h30m), got "soon"'
    ]
