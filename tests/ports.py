"""Ports for tests: one that stays closed as long as a test needs it, and starting something
on a port picked free when it must be known before the start binds it, and waiting until a
server started so answers."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from globalstore.localkafka import free_port

_T = TypeVar("_T")
# How a broker, Docker, uvicorn or the CLI say that a port was taken.
_TAKEN = ("already in use", "already allocated")


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A 127.0.0.1 port that refuses connections. The socket stays bound (never listening)
    until the block ends, so no other process can take the port meanwhile: a port picked
    free and used later could be listening by then."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


class PortTakenError(Exception):
    """Another process took the port a start was given before the start could bind it."""


def says_port_taken(text: str) -> bool:
    return any(marker in text for marker in _TAKEN)


def on_a_free_port(start: Callable[[int], _T], attempts: int = 4) -> _T:
    """start(port) on a port that was free a moment ago. A start that finds the port taken
    in between cleans up and raises PortTakenError; it is tried again on another port, and the
    last attempt's PortTakenError fails the test."""
    for _ in range(attempts - 1):
        with contextlib.suppress(PortTakenError):
            return start(free_port())
    return start(free_port())


def wait_until_answering(
    process: subprocess.Popen[bytes],
    answers: Callable[[], bool],
    log_file: Path,
    name: str,
    timeout_s: float,
) -> None:
    """Poll `answers` until it holds for the server `process` just started. A process that
    exits first raises PortTakenError when its log says its port was taken (the caller tries
    another), else RuntimeError with the log's tail; past `timeout_s` it is killed."""
    deadline = time.monotonic() + timeout_s
    while not answers():
        if process.poll() is not None:
            output = log_file.read_text(errors="replace")
            if says_port_taken(output):
                raise PortTakenError(f"{name}: port taken")
            raise RuntimeError(f"{name} exited: {output[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"{name} did not answer within {timeout_s:.0f} s")
        time.sleep(0.1)
