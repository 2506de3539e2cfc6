"""Streamed responses (export, snapshot) under limits: at most so many of a route at once, a
request waits for a free slot no longer than its own `wait`, and a client that stops reading
for `idle_timeout` seconds is dropped.

What a stream holds (a RocksDB view, a checkpoint's hard links) is opened by its chunk
generator inside the response, in a worker thread, and released when that generator ends or is
closed. The response closes it in every case: the body done, the client gone before the first
byte or halfway, dropped as idle, or the task cancelled by the server's shutdown."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Iterable, Mapping

import anyio
from prometheus_client import Gauge
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

__all__ = ["ErrorAnswer", "LimitedStream", "NoFreeSlot", "Slots", "drained"]

log = logging.getLogger(__name__)

ErrorAnswer = Callable[[Exception], Response | None]  # the route's answer to an error, if any

_DONE = object()
_CLIENT_GONE = 499  # counted for a client that left before its status was sent (as nginx does)


class NoFreeSlot(Exception):  # noqa: N818 - reads as the condition it reports
    """Every slot of a route stayed taken for as long as the request could wait (HTTP 503)."""

    def __init__(self, route: str, limit: int, retry_after: int) -> None:
        super().__init__(f"{limit} {route} streams already running; retry later")
        self.retry_after = retry_after


class _ClientIdle(Exception):  # noqa: N818
    pass


class Slots:
    """At most `limit` streams of one route at once."""

    def __init__(self, route: str, limit: int, retry_after: int, active: Gauge) -> None:
        self.route = route
        self.limit = limit
        self.retry_after = retry_after
        self.in_use = 0
        self._free = anyio.Semaphore(limit)
        self._active = active

    async def take(self, wait: float) -> None:
        """Take a slot, waiting up to `wait` seconds for one; NoFreeSlot if none came free."""
        try:
            self._free.acquire_nowait()  # a free slot even when wait is 0
        except anyio.WouldBlock:
            with anyio.move_on_after(max(0.0, wait)) as waited:
                await self._free.acquire()
            if waited.cancelled_caught:
                raise NoFreeSlot(self.route, self.limit, self.retry_after) from None
        self.in_use += 1
        self._active.inc()

    def release(self) -> None:
        """Give back a slot a stream took."""
        self.in_use -= 1
        self._active.dec()
        self._free.release()


async def drained(pools: Iterable[Slots], timeout: float) -> None:
    """Wait (up to `timeout`) until no stream holds a slot: before the store closes, every
    stream has released what it read from the store."""
    with anyio.move_on_after(timeout):
        while any(pool.in_use for pool in pools):
            await anyio.sleep(0.05)


class LimitedStream(Response):
    """The body of `chunks` (a generator not started yet), holding a slot of `slots` that the
    route took. Headers go out after the first chunk is ready, so a failure to open the
    stream (store not ready, disk full) is still a plain error answer."""

    def __init__(
        self,
        chunks: Generator[bytes, None, None],
        slots: Slots,
        idle_timeout: float,
        answer_error: ErrorAnswer,
        count: Callable[[int], None],
        media_type: str,
        headers: Mapping[str, str] | None = None,
        limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        """`limiter`: the worker threads that pull `chunks` (None: anyio's default pool,
        shared with every threaded route; a stream whose chunks wait takes its own)."""
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)
        self._chunks = chunks
        self._limiter = limiter
        # The server's shutdown cancels a request without waiting for the worker thread
        # producing its chunk: closing the generator must wait for that thread to finish.
        self._turn = threading.Lock()
        self._slots: Slots | None = slots
        self._route = slots.route
        self._idle_timeout = idle_timeout
        self._answer_error = answer_error
        self._count: Callable[[int], None] | None = count  # the status, once known

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the body, stopping once the client leaves; the slot is released in any case."""
        try:
            async with anyio.create_task_group() as group:

                async def body() -> None:
                    await self._body(scope, receive, send)
                    group.cancel_scope.cancel()

                group.start_soon(body)
                await _disconnected(receive)
                group.cancel_scope.cancel()  # the client is gone: stop producing for nobody
        finally:
            with anyio.CancelScope(shield=True):  # also when cancelled: release, then go
                await anyio.to_thread.run_sync(self._close, limiter=self._limiter)
            self._release()
            self._counted(_CLIENT_GONE)

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            chunk = await self._next()
        except Exception as exc:
            answer = self._answer_error(exc)
            if answer is None:
                raise
            self._counted(answer.status_code)
            await answer(scope, receive, send)
            return
        self._counted(200)
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        try:
            await self._send(send, start)
            while chunk is not _DONE:
                body = {"type": "http.response.body", "body": chunk, "more_body": True}
                await self._send(send, body)
                chunk = await self._next()
            # The generator ended and let go of what it held: the slot is free before the
            # client sees the end, so its next request finds it free.
            self._release()
            await self._send(send, {"type": "http.response.body", "body": b"", "more_body": False})
        except _ClientIdle:
            log.warning(
                "%s: dropped a client that read nothing for %gs", self._route, self._idle_timeout
            )

    async def _next(self) -> object:
        return await anyio.to_thread.run_sync(self._pull, limiter=self._limiter)

    def _pull(self) -> object:
        with self._turn:
            return next(self._chunks, _DONE)

    def _close(self) -> None:
        with self._turn:
            self._chunks.close()

    async def _send(self, send: Send, message: Message) -> None:
        """Send, unless the client stops reading for the idle timeout (the send then waits
        for the socket's buffer to drain)."""
        try:
            with anyio.fail_after(self._idle_timeout):
                await send(message)
        except TimeoutError:
            raise _ClientIdle from None

    def _counted(self, status: int) -> None:
        if self._count is not None:
            self._count(status)
            self._count = None

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()
            self._slots = None


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
