"""Sampling stages compose: head sampling upstream (``tracestate`` ``ot=th:``) times the tail stage.

The threshold codec against the OpenTelemetry specification's rules; the collector recording each
trace's head probability and π = head × tail, and restating π as ``th`` on the spans it forwards of
traces kept by the baseline slice alone; and a simulation: head sampling at 25% before the tail stage,
the 95% intervals of the population rates cover the truth in 93–97% of repetitions.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tailcut.analysis._estimates import GroupSample
from tailcut.collector import Collector, load_config
from tailcut.collector._headsampling import (
    MAX_THRESHOLD,
    encode_threshold,
    forwarded_tracestate,
    probability,
    threshold,
    threshold_for,
    with_threshold,
)
from tests.otlp_sink import OtlpSink
from tests.test_collector_helpers import export_request, post, rows, span, trace_ids, write_config
from tests.test_collector_policies import policies

# --- the threshold codec -----------------------------------------------------------------------------------


def test_thresholds_as_the_specification_writes_them():
    assert threshold("ot=th:0") == 0 and probability(0) == 1.0
    assert probability(threshold("ot=th:8")) == 0.5  # 8 padded: 0x80000000000000 = 2**55
    assert probability(threshold("ot=th:c")) == 0.25
    assert threshold("vendor=x,ot=rv:abc;th:fd70a4") == 0xFD70A400000000
    assert encode_threshold(threshold_for(0.25)) == "c"
    assert encode_threshold(0) == "0"
    for bad in ("", "ot=th:", "ot=th:G", "ot=th:123456789abcdef", "ot=p:8", "th:8", "ot=th:C"):
        assert threshold(bad) is None


@given(st.integers(0, MAX_THRESHOLD - 1))
def test_a_threshold_survives_encoding(value):
    assert threshold(f"ot=th:{encode_threshold(value)}") == value


@given(st.text())
def test_any_tracestate_text_parses_or_is_ignored(text):
    found = threshold(text)
    assert found is None or 0 <= found < MAX_THRESHOLD


@given(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0))
def test_the_forwarded_threshold_only_rises_and_keeps_the_other_members(head, tail):
    upstream = with_threshold("vendor=a,ot=rv:0123456789abcd", threshold_for(head))
    restated = forwarded_tracestate(upstream, head * tail)
    assert (
        restated.startswith("ot=th:") and restated.endswith(",vendor=a") and ";rv:0123456789abcd" in restated
    )
    assert threshold(restated) >= threshold(upstream)
    assert probability(threshold(restated)) == pytest.approx(min(head, head * tail), rel=1e-9, abs=1e-15)


# --- the collector -----------------------------------------------------------------------------------------

QUARTER = with_threshold("", threshold_for(0.25))  # "ot=th:c"
POLICIES = [
    {"name": "errors", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}},
    {"name": "baseline", "type": "probabilistic", "probabilistic": {"sampling_percentage": 100}},
]


def _trace(trace_id: bytes, *, error: bool, tracestate: str) -> list:
    root = trace_id[:8]
    child = span(trace_id, b"\x01" + root[1:], root, name="llm", tailcut__kind="llm")
    top = span(trace_id, root, name="run", error=error, tailcut__kind="root")
    for item in (child, top):
        item.trace_state = tracestate
    return [child, top]


def test_the_collector_records_head_probability_and_restates_pi_when_forwarding(tmp_path):
    with OtlpSink() as sink:
        path = write_config(tmp_path, policies=POLICIES)
        document = yaml.safe_load(path.read_text())
        document["exporters"]["otlphttp/forward"] = {"endpoint": sink.endpoint}
        document["service"]["pipelines"]["traces"]["exporters"].append("otlphttp/forward")
        path.write_text(yaml.safe_dump(document))
        collector = Collector(load_config(path))
        ports = collector.start()
        failing, ordinary, unsampled = trace_ids(3, seed=7)
        try:
            for trace_id, error, state in ((failing, True, QUARTER), (ordinary, False, QUARTER)):
                assert (
                    post(ports.http, export_request(_trace(trace_id, error=error, tracestate=state)))[0]
                    == 200
                )
            assert post(ports.http, export_request(_trace(unsampled, error=False, tracestate="")))[0] == 200
        finally:
            collector.stop()
        found = {
            r["trace_id"]: r
            for r in rows(
                tmp_path / "data", "traces", "SELECT trace_id, head_probability, inclusion_probability FROM t"
            )
        }
        # head 25% x tail: the error policy keeps for sure (1), the 100% slice too; no tracestate: head 1
        assert found[failing.hex()]["head_probability"] == 0.25
        assert found[failing.hex()]["inclusion_probability"] == 0.25
        assert found[ordinary.hex()]["inclusion_probability"] == 0.25
        assert found[unsampled.hex()]["head_probability"] == 1.0
        forwarded = {bytes(s.trace_id): s.trace_state for _, s in sink.spans}
    assert forwarded[failing] == QUARTER  # kept by a deterministic policy: the head's th, untouched
    assert probability(threshold(forwarded[ordinary])) == pytest.approx(0.25)  # slice alone: th states pi
    assert forwarded[unsampled] == "ot=th:0"  # slice alone at 100% with no head: p = 1


# --- simulation: head 25% before the tail stage ----------------------------------------------------------

REPETITIONS = 1000
TRACES = 2000
#: silent: only the baseline slice sees it; partly: half of these runs also fail outright (ERROR status),
#: so the error policy keeps those for sure and the slice represents the rest
RATES = {"silent": 0.04, "partly": 0.08}
TAIL = policies(
    """
    - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
    - {name: baseline, type: probabilistic, probabilistic: {sampling_percentage: 20}}
    """
)


def _repetition(rng: random.Random) -> dict[str, bool]:
    """One population, head-sampled at 25% by trace-id randomness, tail-decided by the real policies."""
    from tailcut.collector._votes import TraceView

    head_threshold = threshold(QUARTER)
    assert head_threshold is not None
    pis, baseline, tail, hits = [], [], [], {name: [] for name in RATES}
    seen = 0
    for _ in range(TRACES):
        trace_id = rng.randbytes(16)
        silent, partly = rng.random() < RATES["silent"], rng.random() < RATES["partly"]
        caught = partly and rng.random() < 0.5
        if int.from_bytes(trace_id[9:], "big") < head_threshold:  # randomness below T: rejected upstream
            continue
        seen += 1
        view = TraceView(trace_id, 2, 0, 1, 1 << 2 if caught else 1, {}, probability(head_threshold))
        decision, _, _ = TAIL.decide(view, 0.0)
        if decision.kept:
            pis.append(decision.inclusion_probability / decision.head_probability)
            baseline.append(decision.baseline)
            tail.append(decision.kept and not decision.slice_only)
            hits["silent"].append(silent)
            hits["partly"].append(partly)
    sample = GroupSample(pis, baseline, seen, tail, hits)
    covered = {}
    for name, truth in RATES.items():
        estimate = sample.rate(name).weighted
        assert estimate is not None
        covered[name] = estimate.low <= truth <= estimate.high
    return covered


@pytest.mark.slow
def test_intervals_cover_the_population_rates_under_head_then_tail_sampling():
    rng = random.Random(2026)
    results = [_repetition(rng) for _ in range(REPETITIONS)]
    for name in RATES:
        coverage = np.mean([r[name] for r in results])
        assert 0.93 <= coverage <= 0.97, (name, coverage)
