"""Helpers for the HTTP API tests: a real uvicorn server in a thread around a real store."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from globalstore import GlobalStore
from globalstore.listeners import StoreListener
from globalstore.server import ServedStore, ServerSettings, server
from tests.integration.store_support import produce
from tests.ports import PortTakenError, on_a_free_port, says_port_taken
from tests.waiting import eventually


@contextlib.contextmanager
def running_server(
    served: ServedStore, settings: ServerSettings | None = None
) -> Iterator[httpx.Client]:
    """uvicorn serving `served` on a loopback port; yields a client for it. On exit the
    server stops the way SIGTERM stops it (and closes the store). The socket is bound here
    and handed to uvicorn, so no other process can take the port in between."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    srv = server(served, settings, "127.0.0.1", port, graceful_seconds=10)
    thread = threading.Thread(
        target=srv.run, kwargs={"sockets": [sock]}, name="test-uvicorn", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert thread.is_alive(), "uvicorn stopped while starting"
        assert time.monotonic() < deadline, "uvicorn did not start within 20s"
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        srv.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "uvicorn did not stop within 30s"


def served_store(
    topic: str, bootstrap: str, path: Path, wrap: Callable[[StoreListener], Any] | None = None
) -> ServedStore:
    def make(listener: StoreListener) -> GlobalStore:
        return GlobalStore(topic, bootstrap, path, listeners=[wrap(listener) if wrap else listener])

    return ServedStore(make, start_timeout=60)


def wait_ready(client: httpx.Client, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        response = client.get("/readyz")
        if response.status_code == 200:
            return
        assert time.monotonic() < deadline, f"not ready within {timeout}s: {response.text}"
        time.sleep(0.02)


def wait_position(client: httpx.Client, wanted: Mapping[int, int], headers: Any = None) -> None:
    """Block until the served store applied `wanted` (via the API's own min_position)."""
    spec = ",".join(f"{p}:{o}" for p, o in wanted.items())
    response = client.get("/v1/count", params={"min_position": spec}, headers=headers)
    assert response.status_code == 200, response.text


def serving_process(
    command: list[str],
    env: dict[str, str],
    bind: Callable[[int], list[str]] = lambda port: ["--port", str(port)],
) -> tuple[subprocess.Popen[str], str]:
    """`command --port N` (a `globalstore serve` command line; `bind` says how another server
    takes its port) started and ready; its base URL. N was free a moment ago: if another
    process took it before the server bound it, the server says so and exits; try another."""

    def start(port: int) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen([*command, *bind(port)], env=env, stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}"
        if _ready(proc, base):
            return proc, base
        errors = proc.stderr.read()  # type: ignore[union-attr]
        if says_port_taken(errors):
            raise PortTakenError(errors)
        raise AssertionError(f"serve exited early: {errors}")

    return on_a_free_port(start)


def wait_every_worker_ready(base: str) -> None:
    """Wait until every worker of a `serve --workers` at `base` is ready: a worker registers
    before it has opened the writer's copy, and answers 503 until then, so wait until 16 new
    connections in a row find their worker ready."""
    eventually(
        lambda: all(httpx.get(f"{base}/readyz").status_code == 200 for _ in range(16)),
        30,
        lambda: "a worker not ready",
        0.05,
    )


def _ready(proc: subprocess.Popen[str], base: str) -> bool:
    """True once /readyz answers 200; False if the process exited first."""
    deadline = time.monotonic() + 60
    while proc.poll() is None:
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "serve not ready within 60s"
        time.sleep(0.05)
    return False


def produce_incompressible(bootstrap: str, topic: str, count: int, size: int = 4096) -> None:
    """`count` keys with string values of `size` random characters, which neither Kafka nor
    RocksDB can compress: an export or a snapshot of them is bigger than what the sockets
    between a server and a client that stops reading can hold (about 4 MB here)."""
    raw = size * 3 // 4
    produce(
        bootstrap,
        topic,
        [(f"b{i:06d}", base64.b64encode(os.urandom(raw)).decode()) for i in range(count)],
    )


def raw_get(client: httpx.Client, path: str) -> socket.socket:
    """Send GET `path` on a bare socket with a small receive buffer and return the socket, for
    a client that hangs up at once or stops reading (httpx reads what arrives)."""
    url = client.base_url
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((url.host, url.port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {url.host}\r\n\r\n".encode("ascii"))
    return sock


def read_to_end(sock: socket.socket, timeout: float = 60) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    received = bytearray()
    while chunk := sock.recv(1 << 20):
        received += chunk
    return bytes(received)


def metric(client: httpx.Client, line_start: str) -> float:
    """The value of the /metrics sample whose line starts with `line_start`; 0 before it has
    one (a labelled series appears when first counted)."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
