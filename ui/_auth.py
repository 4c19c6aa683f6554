"""The viewer's token: required when it listens beyond loopback, checked on every request.

A request carries the token as ``Authorization: Bearer TOKEN``, as the cookie the viewer sets, or once
as ``?token=TOKEN`` (the URL ``tailcut ui`` prints), which sets that cookie. Without it the answer is
401. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Final

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE: Final = "tailcut_ui_token"
#: The ``Host`` names a loopback viewer answers to.
LOOPBACK_HOSTS: Final = ("127.0.0.1", "localhost", "[::1]", "::1")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class TokenMiddleware:
    """Answer 401 to every request without ``token``; set the cookie when it came in the query."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def _matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        from_query = request.query_params.get("token")
        if not (
            self._matches(bearer) or self._matches(request.cookies.get(COOKIE)) or self._matches(from_query)
        ):
            response: Response = PlainTextResponse(
                "401 unauthorized: this viewer needs its token; open the URL `tailcut ui` printed "
                "(it ends in ?token=...) or send Authorization: Bearer TOKEN\n",
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        if not self._matches(from_query):
            await self.app(scope, receive, send)
            return

        async def send_with_cookie(message: dict) -> None:  # type: ignore[type-arg]
            if message["type"] == "http.response.start":
                cookie = f"{COOKIE}={self.token.decode()}; HttpOnly; SameSite=Strict; Path=/"
                message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
            await send(message)

        await self.app(scope, receive, send_with_cookie)
