"""The same service on plain Starlette (docs/web-service.md).

uvicorn examples.starlette_service:app
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from globalstore.aio import AsyncGlobalStore

__all__ = ["app", "store"]

store = AsyncGlobalStore(
    os.environ.get("ORDERS_TOPIC", "orders.current"),
    os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
    os.environ.get("ORDERS_STORE", "state/orders"),
)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with store:  # restores before the first request is answered
        yield


async def order(request: Request) -> JSONResponse:
    value = store.get(request.path_params["order_id"])
    return JSONResponse(value, 200 if value is not None else 404)


async def count(request: Request) -> JSONResponse:
    return JSONResponse({"count": await store.count()})


app = Starlette(
    routes=[Route("/orders/{order_id}", order), Route("/count", count)], lifespan=lifespan
)
