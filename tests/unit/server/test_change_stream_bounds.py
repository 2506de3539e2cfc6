"""/v1/changes under clients that never read, on the real server (uvicorn), no broker: the
memory they pin stays bounded (the feeds' byte bound) while other clients are served, and a
stream that never reads ends after its lifetime, so its slot comes free."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.waiting import eventually

_MIB = 1 << 20


@contextmanager
def _server(
    settings: dict[str, object], changes: int, value_bytes: int
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    command = [sys.executable, "-m", "tests.unit.server.sse_server", json.dumps(settings)]
    command += [str(changes), str(value_bytes)]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{int(server.stdout.readline())}"
        eventually(lambda: healthy(base), 20, lambda: "the server never answered")
        yield server, base
    finally:
        server.terminate()
        server.wait(10)


def healthy(base: str) -> bool:
    """The server at `base` answers /healthz with 200."""
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _never_reading(base: str) -> socket.socket:
    """A client that asks for the change stream and never reads a byte of it."""
    host, port = base.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)))
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.sendall(b"GET /v1/changes HTTP/1.1\r\nHost: localhost\r\n\r\n")
    return client


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_clients_that_never_read_pin_bounded_memory_and_others_are_served() -> None:
    settings = {"max_change_streams": 6, "idle_timeout": 600.0, "export_chunk": 100}
    # 20,000 changes of 8 KiB: ~160 MiB if the feeds held every change they were offered
    # (the feeds share the records).
    with _server(settings, 20_000, 8192) as (server, base):
        before = _rss(server.pid)
        stalled = [_never_reading(base) for _ in range(4)]
        time.sleep(1.0)  # their streams are open
        assert server.stdin is not None and server.stdout is not None
        with httpx.stream("GET", f"{base}/v1/changes", timeout=30) as reading:
            lines = reading.iter_lines()
            assert next(lines) == "event: start"
            server.stdin.write("go\n")
            server.stdin.flush()
            assert server.stdout.readline() == "publishing\n"
            peak, events = 0, 0
            began = time.monotonic()
            for line in lines:  # a client that reads gets its changes (or a resync) meanwhile
                events += line.startswith("event: ")
                peak = max(peak, _rss(server.pid))
                if events >= 50 or time.monotonic() - began > 20:
                    break
            answered = time.monotonic()
            assert httpx.get(f"{base}/v1/count", timeout=5).json() == {"count": 5}
            assert time.monotonic() - answered < 1.0  # a threaded route is not stalled
        assert server.stdout.readline() == "published\n"
        for _ in range(20):
            peak = max(peak, _rss(server.pid))
            time.sleep(0.1)
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        for client in stalled:
            client.close()
    assert events >= 50
    # A feed holds 16 MiB at most (they share the records), a stream one chunk of 100
    # events in flight; the rest is the allocator's slack.
    assert peak - before < 60 * _MIB, (before, peak)
    assert "globalstore_change_stream_bytes" in metrics


def test_a_stream_that_never_reads_ends_after_its_lifetime_and_frees_its_slot() -> None:
    settings = {"max_change_streams": 2, "change_stream_seconds": 2.0, "max_wait": 10.0}
    with _server(settings, 0, 10) as (_server_process, base):
        stalled = [_never_reading(base) for _ in range(2)]
        time.sleep(0.5)  # both slots are taken
        began = time.monotonic()
        with httpx.stream("GET", f"{base}/v1/changes", timeout=15) as third:
            assert third.status_code == 200  # a slot came free within its wait
            assert next(third.iter_lines()) == "event: start"
        assert time.monotonic() - began < 5.0
        for client in stalled:
            client.close()


def test_waiting_streams_leave_the_threads_of_other_routes_alone() -> None:
    # More streams than anyio's default pool has threads (40), each waiting for changes.
    with _server({"max_change_streams": 48}, 0, 10) as (_server_process, base):
        waiting = [_never_reading(base) for _ in range(44)]
        time.sleep(1.0)  # every stream waits in feed.get(keepalive) by now
        for _ in range(3):
            began = time.monotonic()
            assert httpx.get(f"{base}/v1/count", timeout=30).json() == {"count": 5}
            assert time.monotonic() - began < 1.0
        for client in waiting:
            client.close()
