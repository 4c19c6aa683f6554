"""A tool crossing whose response becomes one piece reuses the response's hash for the piece."""

from __future__ import annotations

import tailcut
from tailcut import attributes as attr
from tailcut._pieces import PIECES_SUFFIX, placeholder
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.testing import capture_spans

DOCS = [{"id": i, "body": "lorem ipsum " * 30} for i in range(4)]


@tailcut.tool(name="fetch_docs")
def fetch_docs(query: str) -> list[dict]:
    return DOCS


def test_a_response_recorded_as_one_piece_is_addressed_by_its_own_hash():
    with capture_spans() as spans, tailcut.run("agent"):
        fetch_docs("q")
        fetch_docs("q")  # the same response again: its piece is not sent twice
    first, second = sorted(spans.by_kind("tool"), key=lambda s: s.attributes[attr.SEQ])
    text = canonical_json(DOCS)
    digest = sha256_hex(text)
    assert first.attributes[attr.RESPONSE_SHA256] == digest
    assert first.attributes[attr.RESPONSE] == placeholder(digest)
    [piece] = first.attributes[attr.RESPONSE + PIECES_SUFFIX]
    assert piece == text and sha256_hex(piece) == digest
    assert second.attributes[attr.RESPONSE] == placeholder(digest)
    assert attr.RESPONSE + PIECES_SUFFIX not in second.attributes
