"""tailcut's test kit: test an agent offline against a scripted model, and look at the spans it made.

:class:`ModelServer` is a loopback HTTP server that speaks the OpenAI Chat Completions and Responses APIs
and the Anthropic Messages API (JSON and server-sent-event streams), so the real ``openai`` and
``anthropic`` SDKs talk to it unchanged: only ``base_url`` differs. What the model says is scripted with
:class:`ScriptedReply` values (text, :class:`ToolCall` items, finish reason, :class:`TokenUsage`, or a
:class:`ScriptedError` with its HTTP status), queued with :meth:`ModelServer.enqueue`, else decided by a
:data:`Responder`: a callable that sees each :class:`ReceivedRequest` and returns the reply.
:func:`capture_spans` records the spans made in a block into :class:`CapturedSpans`.

Importing this package needs only tailcut's base install (no network, no pyarrow, duckdb or polars), and
``import tailcut`` does not import it.

Examples
--------
>>> import openai
>>> from tailcut.testing import ModelServer, ScriptedReply
>>> server = ModelServer()
>>> server.enqueue(ScriptedReply(tool_calls=[("lookup", {"city": "Paris"})]))
>>> server.responder = lambda request: ScriptedReply(text=f"It says {request.tool_results[0].content}.")
>>> with server as base_url:
...     with openai.OpenAI(base_url=base_url, api_key="test", max_retries=0) as client:
...         messages = [{"role": "user", "content": "Weather in Paris?"}]
...         first = client.chat.completions.create(model="m", messages=messages)
...         call = first.choices[0].message.tool_calls[0]
...         messages += [first.choices[0].message.model_dump(exclude_none=True),
...                      {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
...         second = client.chat.completions.create(model="m", messages=messages)
>>> call.function.name, call.function.arguments, second.choices[0].message.content
('lookup', '{"city":"Paris"}', 'It says sunny.')
"""

from tailcut.testing._capture import CapturedSpans, capture_spans
from tailcut.testing._request import ReceivedRequest, ToolResult
from tailcut.testing._script import ScriptedError, ScriptedReply, TokenUsage, ToolCall
from tailcut.testing._scripting import Responder, echo_responder
from tailcut.testing._server import ModelServer, ModelServerError

__all__ = [
    "CapturedSpans",
    "ModelServer",
    "ModelServerError",
    "ReceivedRequest",
    "Responder",
    "ScriptedError",
    "ScriptedReply",
    "TokenUsage",
    "ToolCall",
    "ToolResult",
    "capture_spans",
    "echo_responder",
]
