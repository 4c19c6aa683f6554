"""Token counts for replies that do not script their own: a fixed function of request and reply size.

No tokenizer is needed: tests and the demo only need counts that grow with the conversation and stay
identical between runs, so about four characters make a token, as a rough rule for English text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tailcut.canonical import canonical_json
from tailcut.testing._request import ReceivedRequest
from tailcut.testing._script import TokenUsage, ToolCall

_CHARS_PER_TOKEN = 4

# The request fields a model reads; parameters such as temperature cost no tokens.
_PROMPT_FIELDS = {
    "chat": ("messages", "tools"),
    "responses": ("instructions", "input", "tools"),
    "messages": ("system", "messages", "tools"),
}


def estimate_tokens(text: str) -> int:
    """Tokens in ``text``: one per four characters, rounded up, at least one."""
    return max(1, math.ceil(len(text) / _CHARS_PER_TOKEN))


def default_usage(request: ReceivedRequest, text: str | None, tool_calls: Sequence[ToolCall]) -> TokenUsage:
    """The usage reported for a reply of ``text`` and ``tool_calls`` to ``request`` that scripts none."""
    prompt = {name: request.body[name] for name in _PROMPT_FIELDS[request.api] if name in request.body}
    output = (text or "") + "".join(call.name + call.arguments_json for call in tool_calls)
    return TokenUsage(estimate_tokens(canonical_json(prompt)), estimate_tokens(output))
