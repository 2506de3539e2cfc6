"""A small closed-loop HTTP/1.1 load generator: keep-alive connections, one request in flight
on each, latency per request. Light enough to share two cores with the server it measures.

    from benchmarks.loadgen import run_load
    result = run_load("127.0.0.1", 8080, paths, connections=16, seconds=10)
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> str:
        median = statistics.median(self.latencies) if self.latencies else float("nan")
        return (
            f"{self.rate:,.0f} req/s, p50 {median * 1000:.2f} ms, "
            f"p99 {self.percentile(0.99) * 1000:.2f} ms, errors {self.errors}"
        )


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return status


async def _worker(
    host: str,
    port: int,
    requests: itertools.cycle[bytes],
    until: float,
    latencies: list[float],
    errors: list[int],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    clock = time.perf_counter
    try:
        while clock() < until:
            began = clock()
            writer.write(next(requests))
            status = await _read_response(reader)
            latencies.append(clock() - began)
            if status >= 500:
                errors.append(status)
    finally:
        writer.close()


async def _run(
    host: str, port: int, paths: Sequence[str], connections: int, seconds: float, token: str | None
) -> LoadResult:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    raw = [f"GET {p} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n".encode() for p in paths]
    latencies: list[float] = []
    errors: list[int] = []
    began = time.perf_counter()
    until = began + seconds
    await asyncio.gather(
        *(
            _worker(
                host, port, itertools.cycle(raw[i::connections] or raw), until, latencies, errors
            )
            for i in range(connections)
        )
    )
    return LoadResult(len(latencies), len(errors), time.perf_counter() - began, latencies)


def run_load(
    host: str,
    port: int,
    paths: Sequence[str],
    connections: int = 16,
    seconds: float = 10.0,
    token: str | None = None,
) -> LoadResult:
    """GET `paths` round-robin over `connections` keep-alive connections for `seconds`."""
    return asyncio.run(_run(host, port, paths, connections, seconds, token))
