"""The HTTP API on one served store: routes, error mapping, and the ASGI app.

Point lookups and pages run on the event loop (microseconds to a millisecond of RocksDB);
anything that blocks or streams — waits for min_position, counting, export and snapshot
chunks — runs in worker threads, so the loop keeps answering.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from globalstore import snapshot
from globalstore.errors import GlobalStoreError, InvalidValue, StoreClosed, StoreNotReady
from globalstore.reader import reaches
from globalstore.server import openapi, params
from globalstore.server.guard import Guard
from globalstore.server.metrics import Metrics, stopped_by
from globalstore.server.params import BadRequest
from globalstore.server.served import ServedStore
from globalstore.state import State

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS


class _KeyConvertor(Convertor[str]):
    """Any key, slashes and newlines included (Starlette's `path` stops at a newline)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("key", _KeyConvertor())


@dataclass(frozen=True)
class ServerSettings:
    """Limits and protection of the API; the bind address is the runner's business."""

    token: str | None = None
    max_wait: float = 10.0  # seconds a min_position query may wait
    default_limit: int = 100
    max_limit: int = 1000  # hard bound on a page
    export_chunk: int = 1000  # items per streamed chunk of /v1/export
    max_waiting: int = 100  # min_position waits in flight at once (each holds a thread)


class PositionNotReached(Exception):  # noqa: N818 - reads as the condition it reports
    def __init__(self, wanted: Mapping[int, int], current: Mapping[int, int], waited: float):
        super().__init__(f"min_position not reached within {waited:g}s")
        self.wanted = dict(wanted)
        self.current = dict(current)


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(body, option=_JSON_OPTIONS), status, headers, media_type="application/json"
    )


Handler = Callable[[Request], Awaitable[Response]]


class Api:
    """The route handlers, bound to one served store."""

    def __init__(self, served: ServedStore, settings: ServerSettings, metrics: Metrics) -> None:
        self.served = served
        self.settings = settings
        self.metrics = metrics
        self._waiters = anyio.CapacityLimiter(settings.max_waiting)
        self._openapi = orjson.dumps(
            openapi.document(settings.max_limit, settings.default_limit, settings.token is not None)
        )

    def routes(self) -> list[Route]:
        table: list[tuple[str, str, Handler]] = [
            ("/v1/keys/{key:key}", "key", self.get_key),
            ("/v1/keys", "keys", self.list_keys),
            ("/v1/export", "export", self.export),
            ("/v1/count", "count", self.count),
            ("/v1/status", "status", self.status),
            ("/v1/snapshot", "snapshot", self.snapshot),
            ("/healthz", "healthz", self.healthz),
            ("/readyz", "readyz", self.readyz),
            ("/metrics", "metrics", self.prometheus),
            (openapi.PATH, "openapi", self.openapi),
        ]
        return [Route(path, self._measured(name, fn), methods=["GET"]) for path, name, fn in table]

    def _measured(self, name: str, handler: Handler) -> Handler:
        requests = self.metrics.requests
        latency = self.metrics.latency.labels(name)

        async def endpoint(request: Request) -> Response:
            began = time.perf_counter()
            try:
                response = await handler(request)
            except BadRequest as exc:
                response = _json({"error": str(exc)}, 400)
            except StoreNotReady as exc:
                response = self._unavailable(str(exc))
            except StoreClosed as exc:
                response = self._unavailable(f"{exc} (the store does not follow the topic)")
            except PositionNotReached as exc:
                body = {"error": str(exc), "position": exc.current, "min_position": exc.wanted}
                response = _json(body, 503, {"Retry-After": "1"})
            except InvalidValue as exc:
                self.metrics.decode_errors.inc()
                response = _json({"error": f"InvalidValue: {exc}"}, 500)
            except GlobalStoreError as exc:  # StorageError and the like: say what failed
                response = _json({"error": f"{type(exc).__name__}: {exc}"}, 500)
            latency.observe(time.perf_counter() - began)
            requests.labels(name, response.status_code).inc()
            return response

        return endpoint

    def _unavailable(self, message: str) -> Response:
        state = self.served.store.status().state
        return _json({"error": message, "state": state}, 503, {"Retry-After": "1"})

    async def _await_position(self, query: Mapping[str, str]) -> None:
        wanted = params.min_position(query)
        wait = params.seconds(query, "wait", self.settings.max_wait, self.settings.max_wait)
        if not wanted:
            return
        store = self.served.store
        current = store.position()
        if reaches(current, wanted):
            return
        if not store.status().ready:
            raise StoreNotReady(f"store for {store.topic!r} is not ready")
        with self.metrics.waiting.track_inprogress():
            reached = await anyio.to_thread.run_sync(
                store.wait_for, wanted, wait, limiter=self._waiters
            )
        if not reached:
            raise PositionNotReached(wanted, store.position(), wait)

    # -- queries -----------------------------------------------------------------------------

    async def get_key(self, request: Request) -> Response:
        query = request.query_params
        if query:
            await self._await_position(query)
        key = params.text(request.path_params, "key") or ""
        entry = self.served.store.get_entry(key)
        if entry is None:
            return _json({"error": "key not found", "key": key}, 404)
        return _json(entry)

    async def list_keys(self, request: Request) -> Response:
        query = request.query_params
        span = params.key_range(query)
        limit = params.integer(
            query, "limit", self.settings.default_limit, 1, self.settings.max_limit
        )
        after = params.cursor(query)
        await self._await_position(query)
        start = span.start
        if after is not None:
            # Resume just past the last key returned: keys are compared as UTF-8 bytes, which
            # order like code points, and "\0" appended is the next possible key.
            following = after + "\0"
            start = following if start is None or following > start else start
        found = list(
            self.served.store.items(prefix=span.prefix, start=start, end=span.end, limit=limit + 1)
        )
        more = len(found) > limit
        page = found[:limit]
        return _json(
            {
                "items": [{"key": k, "value": v} for k, v in page],
                "cursor": params.encode_cursor(page[-1][0]) if more else None,
            }
        )

    async def export(self, request: Request) -> Response:
        query = request.query_params
        span = params.key_range(query)
        await self._await_position(query)
        # The view is fixed here, before the first byte: one point in time for the whole stream.
        items = self.served.store.items(prefix=span.prefix, start=span.start, end=span.end)
        chunks = _ndjson_chunks(items, self.settings.export_chunk)
        return StreamingResponse(_in_threads(chunks), media_type="application/x-ndjson")

    async def count(self, request: Request) -> Response:
        await self._await_position(request.query_params)
        n = await anyio.to_thread.run_sync(self.served.store.count)
        return _json({"count": n})

    async def status(self, request: Request) -> Response:
        report = dataclasses.asdict(self.served.store.status())
        progress = self.served.progress()
        report["restore"] = {**dataclasses.asdict(progress), "rate": progress.rate}
        report["start_error"] = None if self.served.error is None else str(self.served.error)
        return _json(report)

    async def snapshot(self, request: Request) -> Response:
        store = self.served.store
        dest = snapshot.checkpoint_dir(store.path)
        await anyio.to_thread.run_sync(store.checkpoint, dest)
        name = f"{store.topic}.snapshot.tar".replace('"', "")

        def chunks() -> Iterator[bytes]:
            try:
                yield from snapshot.tar_chunks(dest)
            finally:
                shutil.rmtree(dest, ignore_errors=True)

        return StreamingResponse(
            _in_threads(chunks()),
            media_type="application/x-tar",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    # -- probes and documents ----------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        """503 once the store can no longer follow (it never started, or its thread stopped
        on an error): a restart is the way on. Open without a token, so it names the error's
        type only; its message (paths, brokers, user names) is in /v1/status."""
        failure = stopped_by(self.served, self.served.store.status())
        if failure is not None:
            return _json({"status": "failed", "error": failure}, 503)
        return _json({"status": "alive"})

    async def readyz(self, request: Request) -> Response:
        state = self.served.store.status().state
        ready = state is State.RUNNING
        return _json({"status": "ready" if ready else state}, 200 if ready else 503)

    async def prometheus(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(self, request: Request) -> Response:
        return Response(self._openapi, media_type="application/json")


def _ndjson_chunks(items: Iterator[tuple[str, Any]], size: int) -> Iterator[bytes]:
    """NDJSON lines in chunks of `size` items. A value that cannot be decoded ends the stream
    (after the lines before it) with an {"error": ...} line: the 200 status is already sent."""
    dumps = orjson.dumps
    lines: list[bytes] = []
    try:
        for key, value in items:
            lines.append(dumps({"key": key, "value": value}))
            if len(lines) == size:
                lines.append(b"")
                yield b"\n".join(lines)
                lines = []
    except (InvalidValue, StoreClosed) as exc:
        lines.append(dumps({"error": f"{type(exc).__name__}: {exc}"}))
    finally:
        with contextlib.suppress(Exception):
            items.close()  # type: ignore[attr-defined]  # a generator: releases the iterator
    if lines:
        lines.append(b"")
        yield b"\n".join(lines)


async def _in_threads(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Pull each chunk in a worker thread. If the client goes away the generator is closed
    after the chunk in progress, releasing its RocksDB iterator or checkpoint."""
    done = object()
    try:
        while True:
            chunk = await anyio.to_thread.run_sync(next, chunks, done)
            if chunk is done:
                return
            yield chunk  # type: ignore[misc]
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def create_app(served: ServedStore, settings: ServerSettings | None = None) -> Guard:
    """The ASGI app: the API on `served`, which it starts on startup and closes on shutdown."""
    settings = settings or ServerSettings()
    api = Api(served, settings, Metrics(served))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        served.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(served.close)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return _json({"error": getattr(exc, "detail", "internal error")}, status)

    app = Starlette(
        routes=api.routes(), lifespan=lifespan, exception_handlers={HTTPException: http_error}
    )
    return Guard(app, settings.token)
