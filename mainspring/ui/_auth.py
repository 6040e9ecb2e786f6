"""The token every request needs, and the headers every response carries.

The token is random (``secrets.token_urlsafe``), printed once in the URL as Jupyter does.
A request may carry it as the ``token`` query parameter (a page opened from the printed
URL: answered with a redirect to the same page without it and an ``HttpOnly``,
``SameSite=Strict`` cookie of this origin), in the cookie, or in the ``X-Mainspring-Token``
header. Compared in constant time; a missing or wrong token is 403 and nothing else runs.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The header a script may send the token in.
HEADER = "x-mainspring-token"
#: The query parameter of the printed URL.
PARAM = "token"

#: Sent with every response. The page's scripts and styles are the package's own files:
#: nothing inline, nothing from elsewhere; no frame may hold the page.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return secrets.token_urlsafe(32)


def same(given: str | None, token: str) -> bool:
    """Whether ``given`` is ``token``, compared in constant time."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


def cookie_name(scope: Scope) -> str:
    """The cookie's name: one per port, since a browser shares a host's cookies across its
    ports (two views on one machine must not overwrite each other's token)."""
    server = scope.get("server") or ("", 0)
    return f"mainspring_ui_{server[1] or 0}"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _cookie(scope: Scope) -> str | None:
    raw = _header(scope, b"cookie")
    if raw is None:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed cookie header is no token
        return None
    morsel = jar.get(cookie_name(scope))
    return None if morsel is None else morsel.value


class TokenGate:
    """ASGI middleware: refuses (403) every HTTP request without the token, adds the
    security headers to every response."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        from_query = next((value for key, value in query if key == PARAM), None)
        if same(from_query, self._token):
            await self._landing(scope, send, [(k, v) for k, v in query if k != PARAM])
            return
        if same(_header(scope, HEADER.encode()), self._token) or same(_cookie(scope), self._token):
            await self._app(scope, receive, _with_headers(send))
            return
        await _plain(send, 403, b"403: this view needs the token printed by mainspring ui\n")

    async def _landing(self, scope: Scope, send: Send, rest: list[tuple[str, str]]) -> None:
        """The printed URL: set the cookie and send the browser on without the token in its
        address bar (nor in its history)."""
        # A path of this view only: never ``//host`` (another site to a browser), and
        # percent-encoded (the decoded path may hold CR LF, or anything).
        target = quote("/" + str(scope.get("path") or "/").lstrip("/"), safe="/")
        if rest:
            target += "?" + urlencode(rest)
        cookie = (f"{cookie_name(scope)}={self._token}; Path=/; HttpOnly; SameSite=Strict").encode()
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", target.encode()),
                    (b"set-cookie", cookie),
                    (b"content-length", b"0"),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {key.lower() for key, _ in message.get("headers", ())}
            extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
            message["headers"] = [*message.get("headers", ()), *extra]
        await send(message)

    return sending


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
