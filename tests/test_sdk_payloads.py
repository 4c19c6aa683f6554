"""Redaction defaults and hooks, content capture, and offloading large payloads to the payload store."""

from __future__ import annotations

import json

import pytest

import tailcut
from tailcut import attributes as attr
from tailcut.canonical import canonical_json, sha256_hex
from tailcut.payloads import PayloadCorrupt, PayloadMissing, PayloadStore, stub_ref
from tailcut.redaction import redact_keys, redact_text
from tailcut.testing import capture_spans


@tailcut.tool
def call_api(url: str, headers: dict, body: dict) -> dict:
    return {"echo": body, "token": "t0ps3cret"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"msg":"use sk-proj-abcdefghijklmnop1234 now"}', '{"msg":"use [REDACTED] now"}'),
        ('{"msg":"key sk-ant-api03-aaaaaaaaaaaaaaaaaaaa"}', '{"msg":"key [REDACTED]"}'),
        ('{"h":"bearer abcdefgh12345"}', '{"h":"[REDACTED]"}'),
        ('{"Authorization":"Bearer xyz.abc.def"}', '{"Authorization":"[REDACTED]"}'),
        ('{"aws":"AKIAABCDEFGHIJKLMNOP"}', '{"aws":"[REDACTED]"}'),
        ('{"gh":"ghp_' + "a" * 36 + '"}', '{"gh":"[REDACTED]"}'),
        ('{"q":"risk-free ask-me sk-short"}', '{"q":"risk-free ask-me sk-short"}'),
    ],
)
def test_credential_shaped_strings_are_redacted(text, expected):
    out = redact_text(text)
    assert out == expected
    json.loads(out)  # still valid JSON


@pytest.mark.parametrize(
    "key", ["api_key", "Authorization", "X-Api-Key", "password", "CLIENT_SECRET", "token", "Cookie"]
)
def test_credential_keys_are_redacted_whatever_the_value(key):
    assert redact_keys({"outer": [{key: {"nested": 1}, "keep": 2}]}) == {
        "outer": [{key: "[REDACTED]", "keep": 2}]
    }


def test_redact_keys_returns_the_same_object_when_clean():
    value = {"max_tokens": 100, "tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    assert redact_keys(value) is value


def test_secrets_never_reach_the_span_and_hash_is_of_redacted_text():
    with capture_spans() as spans, tailcut.run("r"):
        call_api(
            "https://api.invalid",
            {"Authorization": "Bearer s3cr3t-token-123"},
            {"api_key": "sk-abcdefghijklmnopqrstu"},
        )
    span = spans.by_kind("tool")[0]
    dump = json.dumps(dict(span.attributes))
    assert "s3cr3t" not in dump and "sk-abcdef" not in dump and "t0ps3cret" not in dump
    assert span.attributes[attr.REQUEST_SHA256] == sha256_hex(span.attributes[attr.REQUEST])


def test_custom_redact_hook_runs_on_decoded_value_after_defaults():
    seen = []

    def hook(value, *, kind, field):
        seen.append((kind, field))
        if field == "response":
            value["echo"] = "<hidden>"
        return value

    with capture_spans(redact=hook) as spans, tailcut.run("r"):
        call_api("u", {}, {"ssn": "123-45-6789"})
    span = spans.by_kind("tool")[0]
    assert json.loads(span.attributes[attr.RESPONSE]) == {"echo": "<hidden>", "token": "[REDACTED]"}
    assert ("tool", "request") in seen and ("tool", "response") in seen


def test_capture_content_off_keeps_hashes_and_sizes():
    with capture_spans(capture_content={"tool": False}) as spans, tailcut.run("r"):
        call_api("u", {}, {"x": 1})
    span = spans.by_kind("tool")[0]
    assert attr.REQUEST not in span.attributes and attr.RESPONSE not in span.attributes
    assert attr.GEN_AI_TOOL_CALL_ARGUMENTS not in span.attributes
    assert span.attributes[attr.CONTENT_CAPTURED] is False
    assert len(span.attributes[attr.REQUEST_SHA256]) == 64
    assert span.attributes[attr.RESPONSE_BYTES] > 0


def test_large_payload_goes_to_the_store_and_inline_stays_valid_json(tmp_path):
    store = PayloadStore(tmp_path / "payloads")
    big = {"doc": "x" * 5000}
    with (
        capture_spans(inline_limit=1024, payload_store=store, self_contained=True) as spans,
        tailcut.run("r"),
    ):
        call_api("u", {}, big)
    span = spans.by_kind("tool")[0]
    full_request = canonical_json({"body": big, "headers": {}, "url": "u"})
    inline = json.loads(span.attributes[attr.REQUEST])
    ref = stub_ref(inline)
    assert ref == "sha256:" + sha256_hex(full_request)
    assert span.attributes[attr.PAYLOAD_TRUNCATED] is True
    assert ref in span.attributes[attr.PAYLOAD_REF]
    assert span.attributes[attr.REQUEST_SHA256] == sha256_hex(full_request)
    assert store.get_text(ref) == full_request


def test_store_verifies_hashes_on_read(tmp_path):
    store = PayloadStore(tmp_path)
    ref = store.put(b'{"a":1}')
    assert store.get(ref) == b'{"a":1}'
    store.path_for(ref).write_bytes(b'{"a":2}')
    with pytest.raises(PayloadCorrupt, match="does not match its hash"):
        store.get(ref)
    with pytest.raises(PayloadMissing):
        store.get("sha256:" + "0" * 64)


def test_full_store_is_reported_on_the_span_not_raised(tmp_path):
    store = PayloadStore(tmp_path, max_bytes=100)
    with capture_spans(inline_limit=64, payload_store=store, self_contained=True) as spans, tailcut.run("r"):
        result = call_api("u", {}, {"doc": "y" * 500})
    assert result["echo"] == {"doc": "y" * 500}
    span = spans.by_kind("tool")[0]
    assert "is full" in span.attributes[attr.PAYLOAD_ERROR]
    assert span.attributes[attr.PAYLOAD_TRUNCATED] is True
    assert tailcut.stats()["payloads_lost"] >= 1
