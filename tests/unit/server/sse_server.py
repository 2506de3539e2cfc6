"""Child process of test_change_stream_bounds: the real API under uvicorn over a store whose
change feed is driven here, no broker.

    python -m tests.unit.server.sse_server SETTINGS_JSON CHANGES VALUE_BYTES

Prints its port, then "publishing" when a client sends a line on its standard input, and
publishes CHANGES changes of VALUE_BYTES bytes each as fast as it can; "published" when done.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Mapping

import uvicorn

from globalstore import codec
from globalstore.codec import format_headers
from globalstore.read.changes import ChangeFeed, Feeds
from globalstore.server import ServedStore, ServerSettings, create_app
from globalstore.status import State
from tests.unit.server.test_probes import ReportingStore, status


class FeedingStore(ReportingStore):
    """A running store with a change feed and a count: what /v1/changes and /v1/count use."""

    def __init__(self) -> None:
        super().__init__(status(State.RUNNING))
        self.feeds = Feeds()

    def changes(self, prefix: str | None = None) -> ChangeFeed:
        return self.feeds.subscribe("t", codec.decode, prefix)

    def position(self) -> Mapping[int, int]:
        return {0: 0}

    def count(self) -> int:
        return 5


def publish(store: FeedingStore, changes: int, value_bytes: int) -> None:
    sys.stdin.readline()
    print("publishing", flush=True)
    filler = b"x" * value_bytes
    for o in range(0, changes, 100):
        # Each value its own bytes, as records from the topic are.
        batch = [(b"k%d" % i, b'"%d%s"' % (i, filler), format_headers(), 0, i, 0)
                 for i in range(o, o + 100)]  # fmt: skip
        store.feeds.publish(object(), batch)
        time.sleep(0.005)  # a busy topic, not one burst: a reading client keeps up
    print("published", flush=True)


def main() -> None:
    settings = ServerSettings(**json.loads(sys.argv[1]))
    changes, value_bytes = int(sys.argv[2]), int(sys.argv[3])
    store = FeedingStore()
    app = create_app(ServedStore.of(store), settings)  # type: ignore[arg-type]
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    print(listening.getsockname()[1], flush=True)
    threading.Thread(target=publish, args=(store, changes, value_bytes), daemon=True).start()
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    uvicorn.Server(config).run(sockets=[listening])


if __name__ == "__main__":
    main()
