"""Sampling policies: each type's semantics (the Collector's), combinations, the final decision and pi."""

from __future__ import annotations

import random

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tailcut.collector._combinators import build_members, build_policy
from tailcut.collector._confignode import Node
from tailcut.collector._decide import PolicySet
from tailcut.collector._votes import Decision, TraceView

SAMPLED, NOT_SAMPLED, DROPPED = Decision.SAMPLED, Decision.NOT_SAMPLED, Decision.DROPPED
UNSET, OK, ERROR = 1 << 0, 1 << 1, 1 << 2


def policy(text: str):
    return build_policy(Node(yaml.safe_load(text), "policy"))


def policies(text: str) -> PolicySet:
    return PolicySet(build_members(Node(yaml.safe_load(text), "policies"), tuple(_all_types())))


def _all_types():
    from tailcut.collector._combinators import POLICY_TYPES

    return POLICY_TYPES


def trace(
    *,
    spans: int = 3,
    duration_ms: float = 10,
    status: int = UNSET,
    trace_id: bytes | None = None,
    **values: object,
) -> TraceView:
    keyed = {
        key.replace("__", "."): value if isinstance(value, list) else [value] for key, value in values.items()
    }
    return TraceView(
        trace_id or random.Random(spans).randbytes(16), spans, 0, int(duration_ms * 1_000_000), status, keyed
    )


def decision(text: str, view: TraceView, now: float = 0.0) -> Decision:
    return policy(text).evaluate(view, now).decision


# --- leaf policies ------------------------------------------------------------------------------------------


def test_always_sample():
    assert decision("{name: a, type: always_sample}", trace()) is SAMPLED


@pytest.mark.parametrize(
    ("duration_ms", "expected"),
    [(100, NOT_SAMPLED), (100.5, NOT_SAMPLED), (101, SAMPLED), (5000, SAMPLED)],
)
def test_latency_threshold_is_exclusive_and_in_whole_milliseconds(duration_ms, expected):
    assert (
        decision("{name: l, type: latency, latency: {threshold_ms: 100}}", trace(duration_ms=duration_ms))
        is expected
    )


def test_latency_with_upper_bound():
    text = "{name: l, type: latency, latency: {threshold_ms: 100, upper_threshold_ms: 200}}"
    assert [decision(text, trace(duration_ms=d)) for d in (100, 150, 200, 201)] == [
        NOT_SAMPLED,
        SAMPLED,
        SAMPLED,
        NOT_SAMPLED,
    ]


def test_status_code_matches_any_span():
    text = "{name: s, type: status_code, status_code: {status_codes: [ERROR]}}"
    assert decision(text, trace(status=UNSET | ERROR)) is SAMPLED
    assert decision(text, trace(status=UNSET | OK)) is NOT_SAMPLED


def test_numeric_attribute_range_and_types():
    text = "{name: n, type: numeric_attribute, numeric_attribute: {key: k, min_value: 3, max_value: 5}}"
    assert decision(text, trace(k=[1, 4])) is SAMPLED  # any value in range
    assert decision(text, trace(k=[2, 6])) is NOT_SAMPLED
    assert decision(text, trace(k=["4"])) is NOT_SAMPLED  # strings are not numbers
    assert decision(text, trace(k=[True])) is NOT_SAMPLED  # nor are booleans
    assert decision(text, trace(k=[4.5])) is SAMPLED  # doubles compare as numbers (tailcut extension)
    assert decision(text, trace()) is NOT_SAMPLED


def test_numeric_attribute_open_bounds_and_invert():
    at_least = "{name: n, type: numeric_attribute, numeric_attribute: {key: score, min_value: 3.5}}"
    assert decision(at_least, trace(score=3.5)) is SAMPLED
    assert decision(at_least, trace(score=3.49)) is NOT_SAMPLED
    inverted = (
        "{name: n, type: numeric_attribute, numeric_attribute: {key: k, max_value: 5, invert_match: true}}"
    )
    assert decision(inverted, trace(k=9)) is SAMPLED
    assert decision(inverted, trace(k=[9, 1])) is NOT_SAMPLED  # one matching value is enough to refuse
    assert decision(inverted, trace()) is SAMPLED  # the key missing everywhere samples


def test_string_attribute_exact_regex_and_invert():
    exact = "{name: s, type: string_attribute, string_attribute: {key: route, values: [/a, /b]}}"
    assert decision(exact, trace(route="/b")) is SAMPLED
    assert decision(exact, trace(route="/b/c")) is NOT_SAMPLED
    regex = (
        "{name: s, type: string_attribute,"
        " string_attribute: {key: route, values: ['/v1/.+'], enabled_regex_matching: true}}"
    )
    assert decision(regex, trace(route="/api/v1/x")) is SAMPLED  # unanchored, like Go's MatchString
    assert decision(regex, trace(route="/v1/")) is NOT_SAMPLED
    inverted = (
        "{name: s, type: string_attribute,"
        " string_attribute: {key: route, values: [/health], invert_match: true}}"
    )
    assert decision(inverted, trace(route="/orders")) is SAMPLED
    assert decision(inverted, trace(route=["/orders", "/health"])) is NOT_SAMPLED
    assert decision(inverted, trace()) is SAMPLED


def test_string_attribute_ignores_empty_and_non_strings():
    text = "{name: s, type: string_attribute, string_attribute: {key: k, values: ['', '1']}}"
    assert decision(text, trace(k="")) is NOT_SAMPLED
    assert decision(text, trace(k=1)) is NOT_SAMPLED


def test_boolean_attribute():
    text = "{name: b, type: boolean_attribute, boolean_attribute: {key: force, value: true}}"
    assert decision(text, trace(force=True)) is SAMPLED
    assert decision(text, trace(force=False)) is NOT_SAMPLED
    assert decision(text, trace(force="true")) is NOT_SAMPLED


@pytest.mark.parametrize(
    ("spans", "expected"), [(1, NOT_SAMPLED), (2, SAMPLED), (20, SAMPLED), (21, NOT_SAMPLED)]
)
def test_span_count_bounds_are_inclusive(spans, expected):
    assert (
        decision("{name: c, type: span_count, span_count: {min_spans: 2, max_spans: 20}}", trace(spans=spans))
        is expected
    )


def test_probabilistic_votes_with_its_ratio():
    prob = policy("{name: p, type: probabilistic, probabilistic: {sampling_percentage: 20, hash_salt: x}}")
    rng = random.Random(3)
    votes = [prob.evaluate(trace(trace_id=rng.randbytes(16)), 0.0) for _ in range(400)]
    assert {vote.probability for vote in votes} == {0.2}
    assert 40 < sum(vote.decision is SAMPLED for vote in votes) < 120


def test_rate_limiting_is_per_second_and_strictly_below_the_limit():
    rate = policy("{name: r, type: rate_limiting, rate_limiting: {spans_per_second: 10}}")
    ten = trace(spans=3)
    # 3 + 3 + 3 = 9 < 10; a fourth trace would make 12; the count restarts the next second.
    assert [rate.evaluate(ten, 100.2).decision for _ in range(4)] == [SAMPLED, SAMPLED, SAMPLED, NOT_SAMPLED]
    assert rate.evaluate(ten, 101.0).decision is SAMPLED
    # pi of a rate-limited policy: kept/seen over the last 10 seconds, this trace included (4 of 5).
    assert rate.evaluate(trace(spans=1), 101.5).probability == pytest.approx(5 / 6)


def test_rate_limiting_window_forgets_old_seconds():
    rate = policy("{name: r, type: rate_limiting, rate_limiting: {spans_per_second: 2}}")
    for second in range(5):
        rate.evaluate(trace(spans=5), float(second))  # refused: 5 >= 2
    assert rate.evaluate(trace(spans=1), 20.0).probability == 1.0  # only this trace is in the window


# --- combinations -------------------------------------------------------------------------------------------


AND = """{name: prod-errors, type: and, and: {and_sub_policy: [
  {name: prod, type: string_attribute, string_attribute: {key: env, values: [prod]}},
  {name: err, type: status_code, status_code: {status_codes: [ERROR]}}]}}"""


def test_and_needs_every_member():
    both = policy(AND)
    assert both.evaluate(trace(env="prod", status=ERROR), 0).decision is SAMPLED
    assert both.evaluate(trace(env="dev", status=ERROR), 0).decision is NOT_SAMPLED
    assert both.evaluate(trace(env="prod", status=OK), 0).decision is NOT_SAMPLED


def test_and_with_probabilistic_multiplies_probabilities():
    text = """{name: a, type: and, and: {and_sub_policy: [
      {name: e, type: status_code, status_code: {status_codes: [ERROR]}},
      {name: p, type: probabilistic, probabilistic: {sampling_percentage: 10}}]}}"""
    assert policy(text).evaluate(trace(status=ERROR), 0).probability == pytest.approx(0.1)
    assert policy(text).evaluate(trace(status=OK), 0).probability == 0.0


def test_and_does_not_spend_a_skipped_rate_limit():
    text = """{name: a, type: and, and: {and_sub_policy: [
      {name: e, type: status_code, status_code: {status_codes: [ERROR]}},
      {name: r, type: rate_limiting, rate_limiting: {spans_per_second: 4}}]}}"""
    combined = policy(text)
    for _ in range(10):  # never reaches the rate limit: the first member already said no
        combined.evaluate(trace(spans=3, status=OK), 5.0)
    assert combined.evaluate(trace(spans=3, status=ERROR), 5.0).decision is SAMPLED


def test_not_inverts_decision_and_probability():
    text = (
        "{name: n, type: not, not: {not_sub_policy:"
        " {name: p, type: probabilistic, probabilistic: {sampling_percentage: 30}}}}"
    )
    negated = policy(text)
    inner = policy("{name: p, type: probabilistic, probabilistic: {sampling_percentage: 30}}")
    for seed in range(50):
        view = trace(trace_id=random.Random(seed).randbytes(16))
        vote, original = negated.evaluate(view, 0), inner.evaluate(view, 0)
        assert (vote.decision is SAMPLED) == (original.decision is NOT_SAMPLED)
        assert vote.probability == pytest.approx(0.7)


def test_drop_matches_when_all_members_match():
    text = """{name: no-health, type: drop, drop: {drop_sub_policy: [
      {name: h, type: string_attribute, string_attribute: {key: route, values: [/health]}},
      {name: ok, type: not, not: {not_sub_policy: {name: e, type: status_code,
                                                   status_code: {status_codes: [ERROR]}}}}]}}"""
    veto = policy(text)
    assert veto.evaluate(trace(route="/health", status=OK), 0).decision is DROPPED
    assert veto.evaluate(trace(route="/health", status=ERROR), 0).decision is NOT_SAMPLED
    assert veto.evaluate(trace(route="/orders", status=OK), 0).decision is NOT_SAMPLED


COMPOSITE = """{name: budget, type: composite, composite: {
  max_total_spans_per_second: 10, policy_order: [errors, rest],
  composite_sub_policy: [{name: errors, type: status_code, status_code: {status_codes: [ERROR]}},
                         {name: rest, type: always_sample}],
  rate_allocation: [{policy: errors, percent: 60}, {policy: rest, percent: 40}]}}"""


def test_composite_gives_each_member_its_share_of_the_budget():
    budget = policy(COMPOSITE)
    second = 7.0
    errors = [budget.evaluate(trace(spans=2, status=ERROR), second).decision for _ in range(4)]
    assert errors == [SAMPLED, SAMPLED, SAMPLED, NOT_SAMPLED]  # 6 spans allowed: 2 + 2 + 2
    rest = [budget.evaluate(trace(spans=2, status=OK), second).decision for _ in range(3)]
    assert rest == [SAMPLED, SAMPLED, NOT_SAMPLED]  # 4 spans allowed
    assert budget.evaluate(trace(spans=2, status=OK), second + 1).decision is SAMPLED  # a new second


def test_composite_member_without_allocation_gets_nothing():
    text = COMPOSITE.replace(", {policy: rest, percent: 40}", "")
    budget = policy(text)
    assert budget.evaluate(trace(spans=1, status=OK), 1.0).decision is NOT_SAMPLED


# --- the decision over all policies -------------------------------------------------------------------------


DEFAULTISH = """
- {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
- {name: loops, type: numeric_attribute,
   numeric_attribute: {key: tailcut.trace.max_tool_repeat, min_value: 3}}
- {name: no-health, type: drop, drop: {drop_sub_policy: [{name: h, type: string_attribute,
   string_attribute: {key: route, values: [/health]}}]}}
- {name: baseline, type: probabilistic, probabilistic: {sampling_percentage: 5}}
"""


def in_slice(percentage: float, member: bool, salt: str = "") -> bytes:
    from tailcut.collector._hash import TraceIdSampler

    sampler = TraceIdSampler(percentage, salt)
    rng = random.Random(11)
    while True:
        trace_id = rng.randbytes(16)
        if sampler.sampled(trace_id) == member:
            return trace_id


def test_every_matching_policy_is_recorded_and_deterministic_match_has_pi_one():
    decided, votes, _ = policies(DEFAULTISH).decide(
        trace(status=ERROR, tailcut__trace__max_tool_repeat=4, trace_id=in_slice(5, True)), 0
    )
    assert decided.kept
    assert decided.policies == ("errors", "loops", "baseline")
    assert decided.baseline
    assert decided.inclusion_probability == 1.0
    assert [v.decision for v in votes] == [SAMPLED, SAMPLED, NOT_SAMPLED, SAMPLED]


def test_baseline_only_has_pi_p():
    decided, _, _ = policies(DEFAULTISH).decide(trace(trace_id=in_slice(5, True)), 0)
    assert (decided.kept, decided.policies, decided.baseline, decided.inclusion_probability) == (
        True,
        ("baseline",),
        True,
        0.05,
    )
    dropped, _, _ = policies(DEFAULTISH).decide(trace(trace_id=in_slice(5, False)), 0)
    assert (dropped.kept, dropped.policies, dropped.baseline, dropped.inclusion_probability) == (
        False,
        (),
        False,
        0.05,
    )


@given(
    st.sampled_from([UNSET, OK, ERROR]),
    st.integers(0, 5),
    st.sampled_from(["/health", "/run"]),
    st.booleans(),
)
def test_a_decision_is_dropped_exactly_when_a_policy_voted_to_drop(status, repeat, route, member):
    view = trace(
        status=status, tailcut__trace__max_tool_repeat=repeat, route=route, trace_id=in_slice(5, member)
    )
    decided, votes, _ = policies(DEFAULTISH).decide(view, 0)
    assert decided.dropped == any(vote.decision is DROPPED for vote in votes)


def test_drop_wins_over_sample_votes():
    decided, _, _ = policies(DEFAULTISH).decide(
        trace(status=ERROR, route="/health", trace_id=in_slice(5, True)), 0
    )
    assert not decided.kept
    assert decided.policies == ("errors", "no-health", "baseline")
    assert decided.baseline  # membership is the hash's, whatever was dropped
    assert decided.inclusion_probability == 0.0


def test_same_salt_slices_nest_and_different_salts_are_independent():
    nested = policies(
        "- {name: a, type: probabilistic, probabilistic: {sampling_percentage: 5}}\n"
        "- {name: b, type: probabilistic, probabilistic: {sampling_percentage: 20}}"
    )
    assert nested.decide(trace(trace_id=in_slice(20, False)), 0)[0].inclusion_probability == pytest.approx(
        0.2
    )
    independent = policies(
        "- {name: a, type: probabilistic, probabilistic: {sampling_percentage: 5, hash_salt: one}}\n"
        "- {name: b, type: probabilistic, probabilistic: {sampling_percentage: 20, hash_salt: two}}"
    )
    pi = independent.decide(trace(), 0)[0].inclusion_probability
    assert pi == pytest.approx(1 - 0.95 * 0.8)


@given(
    error=st.booleans(),
    repeat=st.integers(0, 6),
    health=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_decision_rules_hold_for_any_trace(error, repeat, health, seed):
    view = trace(
        status=ERROR if error else OK,
        tailcut__trace__max_tool_repeat=repeat,
        route="/health" if health else "/orders",
        trace_id=random.Random(seed).randbytes(16),
    )
    decided, _, _ = policies(DEFAULTISH).decide(view, 0)
    deterministic = error or repeat >= 3
    assert decided.kept == ((deterministic or decided.baseline) and not health)
    if health:
        assert decided.inclusion_probability == 0.0
    elif deterministic:
        assert decided.inclusion_probability == 1.0
    else:
        assert decided.inclusion_probability == 0.05
    assert decided.kept <= (decided.inclusion_probability > 0)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([UNSET, OK, ERROR, OK | ERROR]),
            st.integers(0, 5),
            st.sampled_from(["/health", "/run"]),
            st.sampled_from([1.0, 0.5, 0.0, -0.0]),
            st.binary(min_size=16, max_size=16),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_a_remembered_vote_combination_decides_as_a_fresh_policy_set(traces):
    """A policy set deciding trace after trace (remembering combinations of votes) decides as new ones."""
    remembering = policies(DEFAULTISH)
    for status, repeat, route, head, trace_id in traces:
        view = trace(status=status, tailcut__trace__max_tool_repeat=repeat, route=route, trace_id=trace_id)
        view.head_probability = head
        verdict, fresh = remembering.decide(view, 0.0), policies(DEFAULTISH).decide(view, 0.0)
        assert verdict == fresh
        assert str(verdict.decision.inclusion_probability) == str(fresh.decision.inclusion_probability)
        assert verdict.vote_keys == tuple(
            (policy.name, vote.decision.value)
            for policy, vote in zip(remembering.policies, verdict.votes, strict=True)
        )
