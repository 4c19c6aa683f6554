"""A corpus recorded before the canonical form followed RFC 8785 still loads, verifies and replays.

``tests/fixtures/corpus_before_jcs/corpus`` was written by ``tests/canonical_support.py`` with the code of
that time (main f4aa017), which sorted keys by code point. Every stored hash is of stored bytes, so each
still verifies; a payload without keys beyond U+FFFF has the same text (and hash) today, numbers
included; a request whose key order changed still matches on replay.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tailcut import replay
from tailcut.canonical import canonical_json, loads, sha256_hex
from tests import canonical_support

FIXTURE = Path(__file__).parent / "fixtures" / "corpus_before_jcs" / "corpus"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    copy = tmp_path / "corpus"
    shutil.copytree(FIXTURE, copy)
    return copy


def test_the_old_corpus_loads_and_every_stored_hash_is_of_its_stored_text(corpus: Path) -> None:
    loaded = replay.load_corpus(corpus)  # verifies the manifest and every file's sha256
    [trace_id] = loaded.runs
    envelopes = {e.boundary: e for e in loaded.envelopes(trace_id)}
    assert set(envelopes) == {"tool:lookup", "tool:quote"}
    for envelope in envelopes.values():
        assert sha256_hex(envelope.request) == envelope.request_sha256
        assert sha256_hex(envelope.response) == envelope.response_sha256


def test_payloads_without_astral_keys_keep_their_text_and_hash(corpus: Path) -> None:
    loaded = replay.load_corpus(corpus)
    [trace_id] = loaded.runs
    lookup = next(e for e in loaded.envelopes(trace_id) if e.boundary == "tool:lookup")
    assert canonical_json(loads(lookup.request)) == lookup.request
    assert canonical_json(loads(lookup.response)) == lookup.response
    assert sha256_hex(canonical_json({"order_id": 7})) == lookup.request_sha256


def test_a_payload_whose_key_order_changed_still_replays(corpus: Path) -> None:
    loaded = replay.load_corpus(corpus)
    [trace_id] = loaded.runs
    quote = next(e for e in loaded.envelopes(trace_id) if e.boundary == "tool:quote")
    now = canonical_json(loads(quote.request))
    assert now != quote.request and now.index("\U0001f600") < now.index("\ufb33")  # UTF-16 order
    assert sorted(now) == sorted(quote.request)  # the same characters: only the key order moved

    report = replay.run_replay(loaded, canonical_support.agent, mode="recorded", n=1, canary=False)
    [result] = report.results
    assert result.rerun.divergences == ()
    assert result.rerun.served_counts == {"tool": 2} and result.rerun.live_counts == {}
    assert result.passed
    qty = result.rerun.output["priced"]["order"]["qty"]  # served from the record
    assert qty == 3.0 and isinstance(qty, float)
