"""Several worker processes, one store on disk (docs/web-service.md): one process writes
the store (`globalstore follow`, or `globalstore serve`), each worker reads it with an
AsyncSharedStore, a few milliseconds behind the writer.

    globalstore follow --topic orders.current --path state/orders &
    ORDERS_STORE=state/orders uvicorn --workers 4 examples.shared_workers:app
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, HTTPException

from globalstore.aio import AsyncSharedStore

__all__ = ["app", "store"]

store = AsyncSharedStore(os.environ.get("ORDERS_STORE", "state/orders"))


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with store:  # waits (without blocking) for the writer's ready copy
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/orders/{order_id}")
async def order(order_id: str) -> Any:
    value = store.get(order_id)
    if value is None:
        raise HTTPException(404, f"no order {order_id}")
    return value
