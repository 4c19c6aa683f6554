"""A loop agent whose transcript grows by one tool result per step, recorded through the real SDK.

Run as a script it is an agent process: ``python loop_agent.py STEPS PROTOCOL ENDPOINT [--big[=MIB]]
[--result-kb=KB]`` records one run into ``tailcut collect`` at ENDPOINT over OTLP (``http/protobuf`` or
``grpc``), against a scripted model server of its own, and prints one JSON line: the trace id and the
sha256 of the canonical body of every request the model server received. With ``--big`` the first tool
result and the last model response are 20 MB each (``--big=40``: 40 MiB); ``--result-kb`` sets the size
of the other tool results (3 KB). Imported, :func:`loop_agent` is the entry point a replay calls.
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


def numbered(prefix: str, line: str, size: int) -> str:
    """``size`` characters of numbered lines: no two stretches alike, so no two pieces alike either."""
    return "".join(f"{prefix} {i}: {line}; " for i in range(size // (len(prefix) + len(line) + 5) + 1))[:size]


def tool_result(step: int, size: int) -> str:
    """A tool result of ``size`` characters, distinct per step."""
    return numbered(f"[record {step}]", "order history line", size)


@tailcut.tool(name="lookup")
def lookup(step: int, size: int) -> str:
    return tool_result(step, size)


def loop_agent(run_input: dict[str, Any]) -> list[str]:
    """``steps`` model calls, each sending the whole transcript; returns the model's replies."""
    client = CLIENT["openai"]
    steps, big = int(run_input["steps"]), int(run_input.get("big") or 0)
    result = int(run_input.get("result") or 3000)
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
            messages.append({"role": "user", "content": lookup(step, big if big and step == 0 else result)})
        run.set_outcome("pass")
    return replies


def main(argv: list[str]) -> None:
    from tailcut.canonical import canonical_json, sha256_hex
    from tailcut.testing import ModelServer, ScriptedReply

    steps, protocol, endpoint = int(argv[0]), argv[1], argv[2]
    options = dict(arg.partition("=")[::2] for arg in argv[3:])
    big = (int(options["--big"]) * 1024 * 1024 if options["--big"] else BIG) if "--big" in options else 0
    result = int(options.get("--result-kb") or 3) * 1000
    tailcut.init(service_name="loop-agent", endpoint=endpoint, protocol=protocol, auto_instrument=True)
    server = ModelServer(clock=lambda: 1_700_000_000.0)
    with server:
        server.enqueue(
            *(ScriptedReply(text=f"Step {i}: checking the next record.") for i in range(steps - 1))
        )
        server.enqueue(ScriptedReply(text=numbered("reply", "The refund ran twice", big) if big else "Done."))
        with openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0) as client:
            CLIENT["openai"] = client
            loop_agent({"steps": steps, "big": big, "result": result})
        sent = [sha256_hex(canonical_json(request.body)) for request in server.requests]
    tailcut.shutdown()
    print(json.dumps({"requests": sent, "stats": tailcut.stats()}))


if __name__ == "__main__":
    main(sys.argv[1:])
