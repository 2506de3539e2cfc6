"""The ASGI layer in front of every route: bounded request size and the optional bearer token
(compared in constant time), with the probes left open for load balancers."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from globalstore.snapshots.fetch import TOKEN_ENV

__all__ = ["MAX_QUERY_BYTES", "OPEN_PATHS", "Guard", "load_token"]

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
MAX_QUERY_BYTES = 32 * 1024


def load_token(token_file: Path | None) -> str | None:
    """The bearer token: from `token_file` when given, else $GLOBALSTORE_TOKEN, else None."""
    if token_file is not None:
        token = token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"token file {token_file} is empty")
        return token
    return os.environ.get(TOKEN_ENV, "").strip() or None


class Guard:
    """Rejects over-long query strings (414) and, with a token, requests without it (401)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._expected = None if token is None else b"Bearer " + token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 414 to an over-long query string and 401 without the right bearer token (open
        paths excepted); pass anything else to the app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if len(scope.get("query_string", b"")) > MAX_QUERY_BYTES:
            await _reply(send, 414, f"query string longer than {MAX_QUERY_BYTES} bytes")
            return
        if self._expected is not None and scope["path"] not in OPEN_PATHS:
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self._expected):
                await _reply(send, 401, "missing or wrong bearer token", auth=True)
                return
        await self.app(scope, receive, send)


async def _reply(send: Send, status: int, message: str, auth: bool = False) -> None:
    body = orjson.dumps({"error": message})
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if auth:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
