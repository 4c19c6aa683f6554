"""Recording a streamed reply without changing what the agent holds.

The agent keeps the SDK's own ``Stream``/``AsyncStream`` object (so ``isinstance`` checks and the SDKs'
stream helpers work unchanged); tailcut only fits three small hooks on that instance:

* its SSE decoder is wrapped, so every event's data is kept exactly as received;
* its item iterator is wrapped, so the span ends when the stream is exhausted or fails;
* its HTTP response's ``close``/``aclose`` is wrapped, so closing the stream early (``close()``, leaving
  a ``with`` block, a helper closing it) ends the span; a stream that is dropped unread ends it when it is
  garbage-collected.

Whichever comes first ends the span, once. The span then records the events and the reply reassembled
from them.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal, Protocol

from tailcut.canonical import loads

StreamEnd = Literal["exhausted", "closed", "error"]


class StreamOwner(Protocol):
    """What a recorded stream reports to when it ends (the call being recorded)."""

    def stream_ended(self, end: StreamEnd, events: list[Any], error: BaseException | None) -> None: ...


class StreamRecorder:
    """The hooks on one SDK stream, and the single place its span is ended from."""

    __slots__ = ("_data", "_ended", "_finalizer", "_lock", "_owner", "_reading")

    def __init__(self, owner: StreamOwner) -> None:
        self._owner = owner
        self._data: list[str] = []
        self._lock = threading.Lock()
        self._ended = False
        self._reading = False
        self._finalizer: weakref.finalize | None = None

    def attach(self, stream: Any) -> None:
        """Fit the hooks on ``stream`` (an SDK ``Stream`` or ``AsyncStream`` not yet read)."""
        is_async = hasattr(stream, "__anext__")
        decoder = _RecordingDecoder(stream._decoder, self._data)
        response = stream.response
        # Set the decoder before the iterator is read: an SDK may build its iterator from a copy.
        stream._decoder = decoder
        inner = stream._iterator
        if is_async:
            stream._iterator = self._track_async(inner)
            response.aclose = self._closing_async(response.aclose)
        else:
            stream._iterator = self._track(inner)
            response.close = self._closing(response.close)
        self._finalizer = weakref.finalize(stream, self.end, "closed")

    def end(self, end: StreamEnd, error: BaseException | None = None) -> None:
        """End the stream's span (only the first call counts)."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        if self._finalizer is not None:
            self._finalizer.detach()
        events = [_decode(data) for data in self._data if data and data != "[DONE]"]
        self._owner.stream_ended(end, events, error)

    def _track(self, inner: Iterator[Any]) -> Iterator[Any]:
        end: StreamEnd = "error"
        error: BaseException | None = None
        try:
            while True:
                self._reading = True
                try:
                    item = next(inner)
                except StopIteration:
                    end = "exhausted"
                    return
                finally:
                    self._reading = False
                yield item
        except GeneratorExit:
            end = "closed"
            close = getattr(inner, "close", None)
            if close is not None:
                close()
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.end(end, error)

    async def _track_async(self, inner: AsyncIterator[Any]) -> AsyncIterator[Any]:
        end: StreamEnd = "error"
        error: BaseException | None = None
        try:
            while True:
                self._reading = True
                try:
                    item = await inner.__anext__()
                except StopAsyncIteration:
                    end = "exhausted"
                    return
                finally:
                    self._reading = False
                yield item
        except GeneratorExit:
            end = "closed"
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.end(end, error)

    def _closing(self, close: Callable[[], None]) -> Callable[[], None]:
        def closing() -> None:
            try:
                close()
            finally:
                if not self._reading:  # a close from inside a read is the SDK finishing the stream
                    self.end("closed")

        return closing

    def _closing_async(self, aclose: Callable[[], Any]) -> Callable[[], Any]:
        async def closing() -> None:
            try:
                await aclose()
            finally:
                if not self._reading:
                    self.end("closed")

        return closing


class _RecordingDecoder:
    """An SDK SSE decoder that also keeps each event's data text, in order."""

    __slots__ = ("_inner", "_sink")

    def __init__(self, inner: Any, sink: list[str]) -> None:
        self._inner = inner
        self._sink = sink

    def iter_bytes(self, iterator: Iterator[bytes]) -> Iterator[Any]:
        for sse in self._inner.iter_bytes(iterator):
            self._sink.append(sse.data)
            yield sse

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        async for sse in self._inner.aiter_bytes(iterator):
            self._sink.append(sse.data)
            yield sse


def _decode(data: str) -> Any:
    """An event's data as JSON when it is JSON (it always is for these APIs), else the text."""
    try:
        return loads(data)
    except ValueError:
        return data
