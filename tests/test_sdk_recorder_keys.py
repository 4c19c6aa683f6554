"""A tool that takes or returns dicts with non-string keys is recorded faithfully and never breaks.

The canonical form refuses such a dict (``{1: "x", "1": "y"}`` once became ``{"1":"x","1":"y"}``); the
recorder records it tagged (``tailcut.canonical.tagged_keys``) so the call keeps its record and its hash.
"""

from __future__ import annotations

from typing import Any

import tailcut
from tailcut import attributes as attr
from tailcut.canonical import loads, sha256_hex
from tailcut.testing import capture_spans


@tailcut.tool(name="tally")
def tally(counts: dict[Any, str]) -> dict[Any, str]:
    return {1: "x", "1": "y", **counts}


def _tool_spans(spans):
    return sorted(
        (s for s in spans if (s.attributes or {}).get(attr.KIND) == "tool"),
        key=lambda s: s.attributes[attr.SEQ],
    )


def test_a_tool_with_non_string_keys_runs_untouched_and_is_recorded_tagged():
    with capture_spans() as spans, tailcut.run("agent", input={7: "seven"}):
        result = tally({2: "b"})
        tally({"2": "b"})
    assert result == {1: "x", "1": "y", 2: "b"}  # the agent gets its own object back
    int_keys, str_keys = _tool_spans(spans)
    assert attr.PAYLOAD_ERROR not in int_keys.attributes
    assert int_keys.attributes[attr.REQUEST] == '{"counts":{"$map":[[2,"b"]]}}'
    assert int_keys.attributes[attr.RESPONSE] == '{"$map":[["1","y"],[1,"x"],[2,"b"]]}'
    assert int_keys.attributes[attr.REQUEST_SHA256] == sha256_hex(int_keys.attributes[attr.REQUEST])
    # 2 and "2" are different arguments, so different requests with different hashes.
    assert str_keys.attributes[attr.REQUEST] == '{"counts":{"2":"b"}}'
    assert str_keys.attributes[attr.REQUEST_SHA256] != int_keys.attributes[attr.REQUEST_SHA256]
    assert str_keys.attributes[attr.RESPONSE] == '{"$map":[["1","y"],["2","b"],[1,"x"]]}'
    (root,) = [s for s in spans if s.parent is None]
    assert loads(root.attributes[attr.RUN_INPUT]) == {"$map": [[7, "seven"]]}


def test_the_same_call_with_keys_in_another_order_hashes_alike():
    with capture_spans() as spans, tailcut.run("agent"):
        tally({3: "c", 2: "b"})
        tally({2: "b", 3: "c"})
    first, second = _tool_spans(spans)
    assert (
        first.attributes[attr.REQUEST]
        == second.attributes[attr.REQUEST]
        == '{"counts":{"$map":[[2,"b"],[3,"c"]]}}'
    )
    assert first.attributes[attr.RESPONSE_SHA256] == second.attributes[attr.RESPONSE_SHA256]


def test_a_tool_schema_with_non_string_keys_does_not_stop_the_import():
    @tailcut.tool(name="odd", schema={"type": "object", "enum_labels": {1: "one"}})
    def odd() -> int:
        return 1

    with capture_spans() as spans, tailcut.run("agent"):
        assert odd() == 1
    [span] = _tool_spans(spans)
    assert span.attributes[attr.TOOL_SCHEMA] == '{"enum_labels":{"$map":[[1,"one"]]},"type":"object"}'
