"""The ledger's chains: a growing transcript is split from where its last request ended, with results
byte for byte those of splitting from scratch (in-place edits of earlier messages included)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tailcut
from tailcut import _config, _pieces
from tailcut import attributes as attr
from tailcut._pieces import Chain, PieceLedger, _Chains, expand, recorded_pieces, split_payload
from tailcut._recorder import recordable
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.testing import capture_spans
from tests.loop_agent import SYSTEM

LONG = st.builds(lambda char, n: char * n, st.characters(codec="utf-8"), st.integers(1000, 1400))
contents = st.one_of(st.text(max_size=12), LONG, st.none(), st.integers(), st.lists(st.text(max_size=4)))
#: Values whose canonical JSON does not parse back to itself, or holds a placeholder: the split must
#: treat them as splitting the text does.
odd = st.one_of(
    st.integers(2**64, 2**70),
    st.floats(),
    st.just("\ud800"),
    st.tuples(st.text(max_size=3)),
    st.frozensets(st.integers(0, 5), max_size=3),
    st.dictionaries(st.integers(0, 2) | st.sampled_from(["0", "1"]), st.text(max_size=3), max_size=3),
    st.just({"$tailcut.piece": "0" * 64}),
)
messages = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": contents | odd}),
    st.text(max_size=8),
    st.integers(0, 120),  # "[1" begins "[12]": an element must end where the chain did
    st.lists(st.integers(), max_size=2),
    odd,
)
steps = st.one_of(
    st.tuples(st.just("append"), messages),
    st.tuples(st.just("edit"), st.integers(0, 50), contents),  # an earlier message changed in place
    st.tuples(st.just("replace"), st.integers(0, 50), messages),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("tools"), st.lists(st.text(max_size=6), max_size=2)),
    st.tuples(st.just("other"), st.lists(messages, max_size=3)),  # a second transcript in the run
    st.tuples(st.just("limit"), st.sampled_from([340, 1000, 65536])),  # the config replaced mid-run
    st.tuples(st.just("field"), st.sampled_from(["system", "input", "temperature", 7]), contents | odd),
    st.tuples(st.just("tuple"), st.none()),  # the transcript sent as a tuple
)


def _apply(step: tuple[Any, ...], transcript: list[Any], request: dict[str, Any]) -> None:
    kind = step[0]
    if kind == "append":
        transcript.append(step[1])
    elif kind == "edit" and transcript:
        message = transcript[step[1] % len(transcript)]
        if isinstance(message, dict):
            message["content"] = step[2]
    elif kind == "replace" and transcript:
        transcript[step[1] % len(transcript)] = step[2]
    elif kind == "pop" and transcript:
        transcript.pop()
    elif kind == "tools":
        request["tools"] = step[1]
    elif kind == "field":
        request[step[1]] = step[2]


def _uncached(text: str, limit: int, ledger: PieceLedger) -> tuple[str, list[str]] | None:
    split = split_payload(text, limit=limit, structured=True)
    if split is None:
        return None
    return split.skeleton, list(ledger.unsent(split.pieces).values())


def _cached(
    value: Any, text: str, config: _config.Config, ledger: PieceLedger
) -> tuple[str, list[str]] | None:
    recorded = recorded_pieces(config, ledger, "llm", "request", text, value)
    if recorded is None:
        return None
    return recorded[0], list(recorded[1].get(attr.REQUEST + ".pieces", []))


@settings(max_examples=200, deadline=None)
@example([], [("append", 1), ("replace", 0, 12)], 65536)
@example([], [("append", "x" * 400), ("limit", 1000)], 340)
@given(
    st.lists(messages, max_size=4),
    st.lists(steps, min_size=1, max_size=12),
    st.sampled_from([340, 1000, 65536]),
)
def test_the_cached_split_is_byte_identical_to_splitting_from_scratch(first, script, limit):
    cached_ledger, reference_ledger = PieceLedger(), PieceLedger()
    transcript: list[Any] = list(first)
    request: dict[str, Any] = {"model": "m", "messages": transcript}
    sent: dict[str, str] = {}
    for step in script:
        _apply(step, transcript, request)
        if step[0] == "limit":
            limit = step[1]
        config = _config.Config(enabled=True, inline_limit=limit)
        if step[0] == "other":
            value = {"model": "m", "messages": step[1]}
        elif step[0] == "tuple":
            value = {**request, "messages": tuple(transcript)}
        else:
            value = request
        value, raw = recordable(value)  # as the recorder has it: a dict keyed by 7 is recorded tagged
        text = raw.decode("utf-8")
        for given_value in (value, None):  # what the recorder has, and a request given as text
            cached = _cached(given_value, text, config, cached_ledger)
            assert cached == _uncached(text, limit, reference_ledger)
            if cached is not None:
                sent.update((sha256_hex(piece), piece) for piece in cached[1])
                whole = expand(cached[0], sent.__getitem__)
                assert whole == text and sha256_hex(whole) == sha256_hex(text)


def test_a_growing_transcript_hashes_only_its_new_messages():
    ledger = PieceLedger()
    transcript: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    computed = []
    for step in range(20):
        transcript.append({"role": "user", "content": f"tool result {step} " * 100})
        text = canonical_json({"model": "m", "messages": transcript})
        split = split_payload(text, limit=65536, structured=True, ledger=ledger)
        assert split is not None
        ledger.unsent(split.pieces, split.chains)
        computed.append(len(split.pieces))
        assert split.chains[0].length == len(transcript)
    # from the second step on: the new message, its content and one link; nothing of the earlier ones
    assert computed[0] == 5 and set(computed[1:]) == {3}
    transcript[1]["content"] = "edited in place"
    text = canonical_json({"model": "m", "messages": transcript})
    split = split_payload(text, limit=65536, structured=True, ledger=ledger)
    assert split is not None and len(split.pieces) > 2 * len(transcript)  # a new chain from the start


def test_a_chain_is_only_reused_by_the_ledger_that_sent_its_pieces():
    text = canonical_json({"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]})
    first, second = PieceLedger(), PieceLedger()
    split = split_payload(text, limit=65536, structured=True, ledger=first)
    assert split is not None
    first.unsent(split.pieces, split.chains)
    again = split_payload(text, limit=65536, structured=True, ledger=second)
    assert again is not None and again.pieces == split.pieces and second.serial != first.serial
    not_sent = split_payload(text, limit=65536, structured=True, ledger=PieceLedger())
    assert not_sent is not None and not_sent.pieces == split.pieces


def test_chains_are_dropped_oldest_first_over_the_budget_and_with_their_ledger():
    chains = _Chains(budget=100)
    for serial in range(3):
        chains.remember(serial, Chain("messages", 1000, "[" + "1," * 20 + "1", 21, "l"))
    assert chains.longest_prefix(0, "messages", 1000, "[" + "1," * 20 + "1]") is None
    found = chains.longest_prefix(2, "messages", 1000, "[" + "1," * 21 + "1]")
    assert found is not None and found.length == 21
    assert chains.longest_prefix(2, "messages", 1000, "[" + "1," * 20 + "12]") is None  # not an element
    assert chains.longest_prefix(2, "messages", 340, "[" + "1," * 21 + "1]") is None  # another limit
    chains.remember(3, Chain("messages", 1000, "[" + "1" * 200, 1, "l"))
    assert chains.longest_prefix(3, "messages", 1000, "[" + "1" * 200 + "]") is None  # over the budget

    ledger = PieceLedger()
    text = canonical_json({"messages": ["a"]})
    split = split_payload(text, limit=65536, structured=True, ledger=ledger)
    assert split is not None
    ledger.unsent(split.pieces, split.chains)
    serial = ledger.serial
    assert _pieces._CHAINS.longest_prefix(serial, "messages", 65536, '["a"]') is not None
    del ledger, split
    gc.collect()
    assert _pieces._CHAINS.longest_prefix(serial, "messages", 65536, '["a"]') is None


class _Drifting:
    """A model whose dump changes every ``period`` times it is taken (a clock in it, say), and fails once."""

    def __init__(self, content: str, period: int, fail_at: int) -> None:
        self.content, self.period, self.fail_at, self.dumps = content, period, fail_at, 0

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        self.dumps += 1
        if self.dumps == self.fail_at:  # while the recorder encodes the request's parts again
            raise RuntimeError("gone")
        tick = (self.dumps + self.period - 1) // self.period % 10
        return {"role": "user", "content": f"{tick} {self.content}"}  # the same length


# the recorder's encodings are every other one: "messages" drifts between the list and its elements
@pytest.mark.parametrize(("where", "period", "fail_at"), [("system", 1, 4), ("messages", 2, 8)])
def test_a_value_that_encodes_differently_the_second_time_is_split_from_its_text(where, period, fail_at):
    config = _config.Config(enabled=True)
    cached_ledger, reference_ledger = PieceLedger(), PieceLedger()
    drifting = _Drifting("x" * 600, period, fail_at)
    transcript: list[Any] = [{"role": "system", "content": SYSTEM}]
    for _ in range(3):
        request = {"model": "m", "messages": transcript, where: drifting}
        if where == "messages":
            request["messages"] = [*transcript, drifting]
        text = canonical_json(request)
        assert _cached(request, text, config, cached_ledger) == _uncached(text, 65536, reference_ledger)
        transcript.append({"role": "assistant", "content": "ok"})
    assert drifting.dumps >= fail_at  # the recorder met the failure


def test_an_sdk_loop_editing_earlier_messages_in_place_records_every_request_exactly(server, oai):
    tailcut.instrument_openai()
    transcript: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    try:
        with capture_spans() as spans, tailcut.run("edits"):
            for step in range(6):
                transcript.append({"role": "user", "content": f"result {step} " * 150})
                if step == 3:
                    transcript[1]["content"] = "summarised"  # the agent compacts its history in place
                oai.chat.completions.create(model="m", messages=transcript)
                transcript.append({"role": "assistant", "content": f"ok {step}"})
    finally:
        tailcut.uninstrument_openai()
    llm = spans.by_kind("llm")
    pieces = {sha256_hex(t): t for s in llm for t in s.attributes.get(attr.REQUEST + ".pieces", ())}
    for span, sent in zip(llm, server.requests, strict=True):
        full = expand(span.attributes[attr.REQUEST], pieces.__getitem__)
        assert full == canonical_json(sent.body)
        assert span.attributes[attr.REQUEST_SHA256] == sha256_hex(full)
    new = [len(s.attributes.get(attr.REQUEST + ".pieces", ())) for s in llm]
    assert new[1:3] == [5, 5] and new[3] > new[4] == 5  # assistant, user (message, content), 2 links
