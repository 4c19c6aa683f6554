"""Raw-socket HTTP helpers for the collector's HTTP tests (no tests here)."""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import time

HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n"


def exchange(
    port: int,
    data: bytes | list[bytes],
    *,
    pause: float = 0.0,
    timeout: float = 30.0,
    context: ssl.SSLContext | None = None,
) -> bytes:
    """Send ``data`` (a list: piece by piece, ``pause`` seconds apart), then read until the server closes.

    Stops sending once the server has closed the connection. Without TLS the sending side is then shut
    down, so a server that keeps the connection alive closes it once it has answered. Returns
    everything received.
    """
    pieces = [data] if isinstance(data, bytes) else data
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    connection = context.wrap_socket(raw, server_hostname="localhost") if context is not None else raw
    received = b""
    with connection:
        for piece in pieces:
            try:
                connection.sendall(piece)
            except OSError:  # the server closed the connection (e.g. a deadline passed)
                break
            if pause:
                time.sleep(pause)
        else:
            if context is None:
                with contextlib.suppress(OSError):  # unless the server has closed already
                    connection.shutdown(socket.SHUT_WR)
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass
    return received


def statuses(received: bytes) -> list[int]:
    """Every final (non-1xx) status code in a response stream, in order (bodies here hold no status lines)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 ([2-5]\d\d) ", received)]


def healthy(port: int, context: ssl.SSLContext | None = None) -> bool:
    """True when ``GET /healthz`` answers 200 on a fresh connection."""
    received = exchange(
        port, b"GET /healthz HTTP/1.1\r\nHost: collector\r\nConnection: close\r\n\r\n", context=context
    )
    return statuses(received) == [200]
