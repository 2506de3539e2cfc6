"""A FastAPI service that embeds a store (docs/web-service.md): the store restores while the
service starts, /ready says when it is complete, reads are plain calls, a caller that just
wrote waits until its write is visible here, /changes streams what changes, and the
project's own HTTP API is mounted under /store beside the service's routes. A SIGTERM ends
the open streams at once, so the server stops without waiting for their clients.

    ORDERS_TOPIC=orders.current KAFKA_BOOTSTRAP=127.0.0.1:9092 ORDERS_STORE=state/orders \\
        uvicorn examples.fastapi_service:app
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from globalstore import StoreNotReady
from globalstore.aio import AsyncGlobalStore
from globalstore.server import ServedStore, create_app, end_changes_on_exit_signals

__all__ = ["app", "store"]

store = AsyncGlobalStore(
    os.environ.get("ORDERS_TOPIC", "orders.current"),
    os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
    os.environ.get("ORDERS_STORE", "state/orders"),
)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    await store.start(wait=False)  # the service answers at once; the store restores behind
    end_changes_on_exit_signals(store)  # else uvicorn waits for every open stream's client
    try:
        yield
    finally:
        await store.close()


app = FastAPI(lifespan=lifespan)
# The project's API (/store/v1/keys/..., /store/v1/status, ...) next to the service's routes.
app.mount("/store", create_app(ServedStore.of(store.sync)))


@app.exception_handler(StoreNotReady)
async def not_ready(request: Request, exc: StoreNotReady) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, 503, {"Retry-After": "1"})


@app.get("/ready")
async def ready(response: Response) -> dict[str, Any]:
    """200 once the store holds the topic (to its end when it started), 503 before."""
    status = store.status()
    response.status_code = 200 if status.ready else 503
    return {"state": status.state, "lag": status.lag}


@app.get("/orders/{order_id}")
async def order(order_id: str, after: str | None = None) -> Any:
    """The order; with `after`, a position as /store/v1/status shows it ({"0": 17, ...}, what
    the caller's write reached), once this instance's store has reached it."""
    if after is not None:
        try:
            visible = await store.wait_for(json.loads(after), timeout=5)
        except (ValueError, AttributeError) as exc:
            raise HTTPException(400, f"after: {exc}") from exc
        if not visible:
            raise HTTPException(504, "the write is not visible here within 5 s")
    value = store.get(order_id)  # microseconds: a plain call on the event loop
    if value is None:
        raise HTTPException(404, f"no order {order_id}")
    return value


@app.get("/changes")
async def changes(prefix: str | None = None) -> StreamingResponse:
    """The orders as they change, one JSON line each (a resync says: re-read)."""

    async def lines() -> AsyncIterator[bytes]:
        async with store.changes(prefix) as feed:
            async for change in feed:
                yield orjson.dumps(dataclasses.asdict(change)) + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")
