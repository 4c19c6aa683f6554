"""A loop agent whose transcript grows by one tool result per step, recorded through the real SDK.

Run as a script it is an agent process: ``python loop_agent.py STEPS PROTOCOL ENDPOINT [--big]`` records
one run into ``tailcut collect`` at ENDPOINT over OTLP (``http/protobuf`` or ``grpc``), against a scripted
model server of its own, and prints one JSON line: the trace id and the sha256 of the canonical body of
every request the model server received. With ``--big`` the first tool result and the last model
response are 20 MB each. Imported, :func:`loop_agent` is the entry point a replay calls.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import openai

import tailcut

SYSTEM = "You are a careful support agent. Check every fact with a tool before you answer. " * 24
BIG = 20 * 1024 * 1024
#: The client :func:`loop_agent` calls (set by the caller: the agent process, or a replaying test).
CLIENT: dict[str, openai.OpenAI] = {}


def tool_result(step: int, big: bool) -> str:
    """A 3 KB tool result (20 MB for the first step of a big run), distinct per step."""
    size = BIG if big and step == 0 else 3000
    return (f"[record {step}] " + "order history line; " * (size // 20 + 1))[:size]


@tailcut.tool(name="lookup")
def lookup(step: int, big: bool) -> str:
    return tool_result(step, big)


def loop_agent(run_input: dict[str, Any]) -> list[str]:
    """``steps`` model calls, each sending the whole transcript; returns the model's replies."""
    client = CLIENT["openai"]
    steps, big = int(run_input["steps"]), bool(run_input.get("big"))
    replies = []
    with tailcut.run("loop-agent", input=run_input) as run:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Why was order 42 refunded twice?"},
        ]
        for step in range(steps):
            completion = client.chat.completions.create(model="gpt-4o-mini", messages=messages, seed=7)
            reply = completion.choices[0].message.content or ""
            replies.append(reply)
            messages.append({"role": "assistant", "content": reply})
            messages.append({"role": "user", "content": lookup(step, big)})
        run.set_outcome("pass")
    return replies


def main(argv: list[str]) -> None:
    from tailcut.canonical import canonical_json, sha256_hex
    from tailcut.testing import ModelServer, ScriptedReply

    steps, protocol, endpoint = int(argv[0]), argv[1], argv[2]
    big = "--big" in argv
    tailcut.init(service_name="loop-agent", endpoint=endpoint, protocol=protocol, auto_instrument=True)
    server = ModelServer(clock=lambda: 1_700_000_000.0)
    with server:
        server.enqueue(
            *(ScriptedReply(text=f"Step {i}: checking the next record.") for i in range(steps - 1))
        )
        server.enqueue(
            ScriptedReply(text=("The refund ran twice. " * (BIG // 22 + 1))[:BIG] if big else "Done.")
        )
        with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0) as client:
            CLIENT["openai"] = client
            loop_agent({"steps": steps, "big": big})
        sent = [sha256_hex(canonical_json(request.body)) for request in server.requests]
    tailcut.shutdown()
    print(json.dumps({"requests": sent, "stats": tailcut.stats()}))


if __name__ == "__main__":
    main(sys.argv[1:])
