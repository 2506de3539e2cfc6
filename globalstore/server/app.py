"""The HTTP API on one served store: routes, error mapping, and the ASGI app (the routes that
report, status, probes, metrics and the OpenAPI document, are in reports.py).

Point lookups run on the event loop (microseconds of RocksDB); anything that blocks, scans or
streams — waits for min_position, counting, pages, export and snapshot chunks — runs in worker
threads, so the loop keeps answering. Streams hold a slot of a bounded pool (streams.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from globalstore import tracing
from globalstore.codec import OnInvalid
from globalstore.errors import (
    GlobalStoreError,
    HistoryUnavailable,
    IndexNotReady,
    InvalidValue,
    StoreClosed,
    StoreNotReady,
    UnknownIndex,
)
from globalstore.read.protocols import reaches, serving
from globalstore.server import bodies, openapi, params
from globalstore.server.bodies import json_response
from globalstore.server.changes import ChangeSource, ChangeStreams, sse_chunks
from globalstore.server.guard import Guard
from globalstore.server.metrics import Metrics
from globalstore.server.params import BadRequest
from globalstore.server.reports import Reports
from globalstore.server.served import ServedStore
from globalstore.server.settings import ServerSettings
from globalstore.server.streams import LimitedStream, NoFreeSlot, Slots, drained
from globalstore.snapshots.fetch import TOKEN_ENV

__all__ = ["Api", "Handler", "PositionNotReached", "create_app"]

log = logging.getLogger(__name__)


class _KeyConvertor(Convertor[str]):
    """Any key, slashes and newlines included (Starlette's `path` stops at a newline)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("key", _KeyConvertor())


_DRAIN_SECONDS = 10.0  # at shutdown, how long streams may take to let go of the store
_INDEX_RETRY_SECONDS = 5  # an index being built: a build takes seconds to minutes
_NO_SNAPSHOTS = (
    "this server answers from worker processes (serve --workers), which read the store but "
    "cannot checkpoint it: take the snapshot from an instance served without --workers, or "
    "start the new instance from the topic (without --bootstrap-from)"
)


class PositionNotReached(Exception):  # noqa: N818 - reads as the condition it reports
    """A read's `min_position` was not reached within its wait."""

    def __init__(self, wanted: Mapping[int, int], current: Mapping[int, int], waited: float):
        super().__init__(f"min_position not reached within {waited:g}s")
        self.wanted = dict(wanted)
        self.current = dict(current)


Handler = Callable[[Request], Awaitable[Response]]


class Api:
    """The route handlers, bound to one served store."""

    def __init__(self, served: ServedStore, settings: ServerSettings, metrics: Metrics) -> None:
        self.served = served
        self.settings = settings
        self.metrics = metrics
        self._waiters = anyio.CapacityLimiter(settings.max_waiting)
        streams = metrics.streams
        self.exports = Slots("export", settings.max_exports, 1, streams.labels("export"))
        # A snapshot runs for minutes: retrying every second would only add load.
        self.snapshots = Slots("snapshot", settings.max_snapshots, 5, streams.labels("snapshot"))
        # Change streams last as long as their clients (up to change_stream_seconds): a cap
        # of their own, so that they never keep an export from running, and threads of their
        # own, since each waits for changes in one: never those of the other routes.
        cap = settings.max_change_streams
        self.feeds = Slots("changes", cap, 1, streams.labels("changes"))
        self._feed_threads = anyio.CapacityLimiter(cap)
        self.change_streams = ChangeStreams()  # ended when the shutdown begins
        metrics.change_bytes.set_function(self.change_streams.held_bytes)
        self.reports = Reports(served, settings, metrics)

    def routes(self) -> list[Route]:
        """Every route, each counted and timed in the metrics."""
        reports = self.reports
        table: list[tuple[str, str, Handler]] = [
            ("/v1/keys/{key:key}", "key", self.get_key),
            ("/v1/keys", "keys", self.list_keys),
            ("/v1/indexes/{name}", "indexes", self.find),
            ("/v1/export", "export", self.export),
            ("/v1/changes", "changes", self.changes),
            ("/v1/count", "count", self.count),
            ("/v1/quarantine", "quarantine", self.quarantine),
            ("/v1/status", "status", reports.status),
            ("/v1/snapshot", "snapshot", self.snapshot),
            ("/healthz", "healthz", reports.healthz),
            ("/readyz", "readyz", reports.readyz),
            ("/metrics", "metrics", reports.prometheus),
            (openapi.PATH, "openapi", reports.openapi),
        ]
        return [
            Route(path, self._measured(path, name, fn), methods=["GET"]) for path, name, fn in table
        ]

    def _measured(self, path: str, name: str, handler: Handler) -> Handler:
        """`handler`, counted and timed in the metrics, and traced (a span per request, when
        the otel extra is installed)."""
        requests = self.metrics.requests
        latency = self.metrics.latency.labels(name)

        async def endpoint(request: Request) -> Response:
            began = time.perf_counter()
            attributes = {"http.request.method": "GET", "http.route": path}
            with tracing.phase(f"GET {path}", attributes, carrier=request.headers) as span:
                try:
                    response = await handler(request)
                except Exception as exc:
                    answer = self._error_answer(exc)
                    if answer is None:
                        raise
                    response = answer
                span.end(None, {"http.response.status_code": response.status_code})
            latency.observe(time.perf_counter() - began)
            if not isinstance(response, LimitedStream):  # a stream counts itself (below)
                requests.labels(name, response.status_code).inc()
            return response

        return endpoint

    def _error_answer(self, exc: Exception) -> Response | None:
        """The answer to an error a route raises; None for one that is a bug (a 500)."""
        told = self._told(exc)
        if isinstance(exc, BadRequest | HistoryUnavailable):  # a time older than the store has
            return json_response({"error": told, **_oldest(exc)}, 400)
        if isinstance(exc, StoreNotReady):
            return self._unavailable(told)
        if isinstance(exc, StoreClosed):
            return self._unavailable(f"{told} (the store does not follow the topic)")
        if isinstance(exc, UnknownIndex):
            return json_response({"error": told}, 404)
        if isinstance(exc, IndexNotReady):
            headers = {"Retry-After": str(_INDEX_RETRY_SECONDS)}
            return json_response({"error": told}, 503, headers)
        if isinstance(exc, PositionNotReached):
            body = {"error": told, "position": exc.current, "min_position": exc.wanted}
            return json_response(body, 503, {"Retry-After": "1"})
        if isinstance(exc, NoFreeSlot):
            return json_response({"error": told}, 503, {"Retry-After": str(exc.retry_after)})
        if isinstance(exc, InvalidValue):
            self.metrics.decode_errors.inc()
            return json_response({"error": f"InvalidValue: {told}"}, 500)
        if isinstance(exc, GlobalStoreError):  # StorageError and the like: say what failed
            return json_response({"error": f"{type(exc).__name__}: {told}"}, 500)
        return None

    def _told(self, exc: Exception) -> str:
        """`exc`'s message for a client: the store's directory named by its last part, as
        .../name. Where the store lies on the host is no client's business (logs and
        /v1/status, behind the token, say it in full)."""
        path, message = self.served.store.path, str(exc)
        for where in {str(path.absolute()), str(path.resolve())}:  # as given, through links
            message = message.replace(where, f".../{path.name}")
        return message

    def _unavailable(self, message: str) -> Response:
        state = self.served.store.status().state
        return json_response({"error": message, "state": state}, 503, {"Retry-After": "1"})

    def _wait(self, query: Mapping[str, str]) -> float:
        """The request's own `wait`: the longest it may wait before its answer starts."""
        return params.seconds(query, "wait", self.settings.max_wait, self.settings.max_wait)

    async def _await_position(self, query: Mapping[str, str], wait: float) -> None:
        wanted = params.min_position(query)
        if not wanted:
            return
        store = self.served.store
        current = store.position()
        if reaches(current, wanted):
            return
        if not serving(store.status()):  # a stale store is following: wait for it
            raise StoreNotReady(f"store for {store.topic!r} is not ready")
        with self.metrics.waiting.track_inprogress():
            reached = await anyio.to_thread.run_sync(
                store.wait_for, wanted, wait, limiter=self._waiters
            )
        if not reached:
            raise PositionNotReached(wanted, store.position(), wait)

    # -- queries -----------------------------------------------------------------------------

    async def get_key(self, request: Request) -> Response:
        """One key's entry (value, timestamp, partition, offset); 404 if absent."""
        query = request.query_params
        if query:
            await self._await_position(query, self._wait(query))
        key = params.text(request.path_params, "key") or ""
        entry = self.served.store.get_entry(key, as_of=params.as_of(query))
        if entry is None:
            return json_response({"error": "key not found", "key": key}, 404)
        return json_response(entry)

    async def list_keys(self, request: Request) -> Response:
        """One page of keys and values, by prefix and/or range, in key order."""
        query = request.query_params
        span = params.key_range(query)
        limit = params.integer(
            query, "limit", self.settings.default_limit, 1, self.settings.max_limit
        )
        after = params.cursor(query)
        when = params.as_of(query)
        await self._await_position(query, self._wait(query))
        start = span.start
        if after is not None:
            # Resume just past the last key returned: keys are compared as UTF-8 bytes, which
            # order like code points, and "\0" appended is the next possible key.
            following = after + "\0"
            start = following if start is None or following > start else start
        store, max_bytes = self.served.store, self.settings.max_page_bytes
        counted = self.metrics.decode_errors.inc

        def scan(report: OnInvalid) -> Iterator[tuple[str, Any]]:
            # limit + 1 keys visited: one past a full page says whether another follows.
            return store.items(
                prefix=span.prefix, start=start, end=span.end, limit=limit + 1, on_invalid=report,
                as_of=when,
            )  # fmt: skip

        body = await anyio.to_thread.run_sync(bodies.page, scan, limit, max_bytes, counted)
        return Response(body, media_type="application/json")

    async def find(self, request: Request) -> Response:
        """One page of the keys an index names: of one index value (`value`), or of index
        values by prefix and/or range, in index value order, then key order."""
        query = request.query_params
        name = params.text(request.path_params, "name") or ""
        value = params.text(query, "value")
        span = params.key_range(query)
        if value is not None and (span.prefix, span.start, span.end) != (None, None, None):
            raise BadRequest("value cannot be combined with prefix, start or end")
        limit = params.integer(
            query, "limit", self.settings.default_limit, 1, self.settings.max_limit
        )
        after = params.match_cursor(query)
        when = params.as_of(query)
        await self._await_position(query, self._wait(query))
        store, max_bytes = self.served.store, self.settings.max_page_bytes
        counted = self.metrics.decode_errors.inc

        def scan(report: OnInvalid) -> Iterator[tuple[str, str, Any]]:
            return store.find_matches(
                name, value, prefix=span.prefix, start=span.start, end=span.end,
                limit=limit + 1, after=after, on_invalid=report, as_of=when,
            )  # fmt: skip

        body = await anyio.to_thread.run_sync(bodies.match_page, scan, limit, max_bytes, counted)
        return Response(body, media_type="application/json")

    async def export(self, request: Request) -> Response:
        """Every key and value by prefix and/or range, as NDJSON, from one point in time."""
        span = params.key_range(request.query_params)
        when = params.as_of(request.query_params)
        store, size = self.served.store, self.settings.export_chunk

        def scan(report: OnInvalid) -> Iterator[tuple[str, Any]]:
            return store.items(
                prefix=span.prefix, start=span.start, end=span.end, on_invalid=report, as_of=when
            )

        def chunks() -> Generator[bytes, None, None]:
            # The view is fixed at the first chunk, before the first byte is sent: one point in
            # time for the whole stream.
            yield from bodies.ndjson_chunks(scan, size, self.metrics.decode_errors.inc)

        return await self._stream(request, self.exports, chunks(), "application/x-ndjson")

    async def changes(self, request: Request) -> Response:
        """Server-sent events of the changes applied from now on (server/changes.py)."""
        store, prefix = self.served.store, params.text(request.query_params, "prefix")
        if not isinstance(store, ChangeSource):
            return json_response({"error": f"a {type(store).__name__} has no change feed"}, 501)
        settings = self.settings
        events = sse_chunks(
            store,
            prefix,
            settings.keepalive,
            settings.export_chunk,
            self.change_streams,
            settings.change_stream_seconds,
        )
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return await self._stream(
            request, self.feeds, events, "text/event-stream", headers, self._feed_threads
        )

    async def _stream(
        self,
        request: Request,
        slots: Slots,
        chunks: Generator[bytes, None, None],
        media_type: str,
        headers: Mapping[str, str] | None = None,
        limiter: anyio.CapacityLimiter | None = None,
    ) -> Response:
        """A stream of `chunks` once min_position is reached and a slot is free, both within
        the request's own `wait`; its chunks pulled by threads of `limiter` (None: the
        default pool)."""
        query = request.query_params
        wait = self._wait(query)
        began = time.monotonic()
        await self._await_position(query, wait)
        await slots.take(wait - (time.monotonic() - began))
        requests = self.metrics.requests

        def count(status: int) -> None:  # 200, or the error that kept the stream from opening
            requests.labels(slots.route, status).inc()

        idle = self.settings.idle_timeout
        return LimitedStream(
            chunks, slots, idle, self._error_answer, count, media_type, headers, limiter
        )

    async def count(self, request: Request) -> Response:
        """The number of live keys."""
        query = request.query_params
        await self._await_position(query, self._wait(query))
        n = await anyio.to_thread.run_sync(self.served.store.count)
        return json_response({"count": n})

    async def quarantine(self, request: Request) -> Response:
        """One page of the records a store with invalid_values="quarantine" did not apply,
        in key order, each value cut to its first bytes (with its length)."""
        query = request.query_params
        limit = params.integer(
            query, "limit", self.settings.default_limit, 1, self.settings.max_limit
        )
        after = params.cursor(query)
        held, max_bytes = self.served.store.quarantined, self.settings.max_page_bytes
        body = await anyio.to_thread.run_sync(bodies.quarantine_page, held, after, limit, max_bytes)
        return Response(body, media_type="application/json")

    async def snapshot(self, request: Request) -> Response:
        """The store as a tar stream of a checkpoint; 409 when served by workers."""
        if not self.settings.snapshots:
            return json_response({"error": _NO_SNAPSHOTS}, 409)
        store = self.served.store
        name = f"{store.topic}.snapshot.tar".replace('"', "")
        disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
        chunks = bodies.snapshot_chunks(store)  # the checkpoint is taken inside the response
        return await self._stream(request, self.snapshots, chunks, "application/x-tar", disposition)


def create_app(served: ServedStore, settings: ServerSettings | None = None) -> Guard:
    """The ASGI app: the API on `served`, which it starts on startup and closes on shutdown."""
    settings = settings or ServerSettings()
    metrics = Metrics(served)
    if settings.otel:
        from globalstore.server.otel import MetricsBridge  # noqa: PLC0415 - the otel extra

        MetricsBridge(metrics.registry)
    api = Api(served, settings, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        api.change_streams.end_on_exit_signals()
        served.start()
        try:
            yield
        finally:
            # Streams cancelled by the shutdown release their views and checkpoints first.
            await drained([api.exports, api.snapshots], _DRAIN_SECONDS)
            await anyio.to_thread.run_sync(served.close)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return json_response({"error": getattr(exc, "detail", "internal error")}, status)

    if settings.token is None:
        log.warning(
            "serving without a token: every local user (and anyone who reaches the address) "
            "can read the whole store and take snapshots; set one (--token-file or %s)",
            TOKEN_ENV,
        )
    app = Starlette(
        routes=api.routes(),
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(settings.allowed_hosts))],
    )
    return Guard(app, settings.token)


def _oldest(exc: Exception) -> dict[str, float | None]:
    """The oldest time a store with history answers, for a read that asked for an older one."""
    return {"oldest": exc.oldest} if isinstance(exc, HistoryUnavailable) else {}
