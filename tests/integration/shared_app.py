"""The service of docs/operations.md ("Many worker processes, one store"), as a module an ASGI
server imports in each worker: every worker serves the store another process writes."""

import os

from globalstore import SharedStore
from globalstore.server import ServedStore, create_app

app = create_app(ServedStore.of(SharedStore(os.environ["ORDERS_STORE"])))
