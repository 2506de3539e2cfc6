"""Run the API on uvicorn (httptools + uvloop where installed). SIGTERM or SIGINT: stop
accepting, let in-flight requests finish (up to `graceful_seconds`), then close the store."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import uvicorn

from globalstore.server.app import create_app
from globalstore.server.served import ServedStore
from globalstore.server.settings import ServerSettings

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "listen", "server", "uvicorn_config"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def server(
    served: ServedStore,
    settings: ServerSettings | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    graceful_seconds: int = 30,
) -> uvicorn.Server:
    """A uvicorn Server for the API; call .run() (blocks, handles signals in the main thread)."""
    return uvicorn.Server(
        uvicorn_config(create_app(served, settings), host, port, graceful_seconds)
    )


def uvicorn_config(
    app: Callable[..., Any] | str, host: str, port: int, graceful_seconds: int, **more: Any
) -> uvicorn.Config:
    """How every server of the API runs: lifespan on, no access log, the application's own
    logging set-up, in-flight requests given `graceful_seconds` on SIGTERM."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=graceful_seconds,
        **more,
    )


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, for the server (and its worker processes, which
    inherit it) to accept on: server(...).run(sockets=[it]). OSError if it cannot be bound
    (the port is taken, the address is not this host's)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
