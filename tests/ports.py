"""A local port that stays closed for as long as a test needs it."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A 127.0.0.1 port that refuses connections. The socket stays bound (never listening)
    until the block ends, so no other process can take the port meanwhile: a port picked
    free and used later could be listening by then."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])
