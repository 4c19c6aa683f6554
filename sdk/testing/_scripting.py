"""Which reply answers a request: queued replies first, then the responder.

A test scripts an exact sequence (``enqueue``); the demo fleet installs a responder that derives a
reply from the conversation. Replies queued for one API are served before replies queued for any API,
so a test mixing OpenAI and Anthropic clients can script each side without caring about interleaving.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from tailcut.errors import ConfigError
from tailcut.testing._request import ReceivedRequest
from tailcut.testing._script import APIS, Api, ScriptedReply, check_api

Responder = Callable[[ReceivedRequest], ScriptedReply]
"""Decides the reply to a request when no queued reply is left."""


def echo_responder(request: ReceivedRequest) -> ScriptedReply:
    """Answer with a short text that repeats the start of the user's latest message.

    Examples
    --------
    >>> from tailcut.testing._request import ReceivedRequest
    >>> body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    >>> echo_responder(ReceivedRequest(0, "chat", "/v1/chat/completions", {}, body, 0.0)).text
    'echo: hello there'
    """
    return ScriptedReply(text=f"echo: {request.last_user_text[:80]}")


class ReplyScript:
    """Thread-safe queues of scripted replies, per API and shared, in front of a responder."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self._shared: deque[ScriptedReply] = deque()
        self._per_api: dict[Api, deque[ScriptedReply]] = {api: deque() for api in APIS}
        self._lock = threading.Lock()

    def enqueue(self, replies: tuple[ScriptedReply, ...], api: str | None) -> None:
        """Append ``replies`` to the queue of ``api`` (``None``: the queue every API reads)."""
        for reply in replies:
            if not isinstance(reply, ScriptedReply):
                raise ConfigError(f"enqueue takes ScriptedReply values, got {type(reply).__name__}")
        queue = self._shared if api is None else self._per_api[check_api(api)]
        with self._lock:
            queue.extend(replies)

    def next_reply(self, request: ReceivedRequest) -> ScriptedReply:
        """Pop the reply for ``request``: its API's queue, then the shared one, then ask the responder."""
        with self._lock:
            for queue in (self._per_api[request.api], self._shared):
                if queue:
                    return queue.popleft()
        reply = self.responder(request)
        if not isinstance(reply, ScriptedReply):
            raise TypeError(f"the responder returned {type(reply).__name__}, not a ScriptedReply")
        return reply

    def pending(self, api: str | None) -> int:
        """How many queued replies are left for ``api`` (``None``: in every queue together)."""
        with self._lock:
            if api is None:
                return len(self._shared) + sum(len(queue) for queue in self._per_api.values())
            return len(self._per_api[check_api(api)])

    def clear(self) -> None:
        """Drop every queued reply (the responder stays)."""
        with self._lock:
            self._shared.clear()
            for queue in self._per_api.values():
                queue.clear()
