"""A sync WSGI service (Flask, Django and the like work the same way) with the sync store:
one process, started when the module is imported (docs/web-service.md). Every call blocks
only the request's own thread. Under a server with several worker processes, use
SharedStore instead (examples/shared_workers.py shows it).

    gunicorn -w 1 --threads 8 examples.wsgi_service:app
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from globalstore import GlobalStore

__all__ = ["app", "store"]

store = GlobalStore(
    os.environ.get("ORDERS_TOPIC", "orders.current"),
    os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
    os.environ.get("ORDERS_STORE", "state/orders"),
).start(timeout=120)  # the restore, before the server takes requests
atexit.register(store.close)


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """GET /orders/<id>[?after=<position as JSON>]: the order, after that position."""
    order_id = environ["PATH_INFO"].removeprefix("/orders/")
    after = parse_qs(environ.get("QUERY_STRING", "")).get("after")
    if after:
        store.wait_for(json.loads(after[0]), timeout=5)  # blocks this request's thread only
    value = store.get(order_id)
    status = "200 OK" if value is not None else "404 Not Found"
    start_response(status, [("Content-Type", "application/json")])
    return [json.dumps(value).encode()]
