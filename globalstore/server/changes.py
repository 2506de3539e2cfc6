"""GET /v1/changes: a store's change feed (read/changes.py) as server-sent events.

The stream opens with `event: start` naming the store's position when the feed began (the
changes that follow are those applied after it; one at or just before it may repeat what the
position covers), then one `event: change` per change, its `id` "partition:offset", `data`
{key, value, partition, offset} (value null for a delete). A client that reads too slowly
for the feed's buffer gets one `event: resync` and must re-read what it cares about; the
changes after it are complete again. A comment line every `keepalive` seconds while nothing
changes keeps proxies from closing the stream and shows a client that left. The stream ends
when the store closes, as soon as the server begins to shut down (ChangeStreams): a stream
never ends of itself, so it would otherwise hold every shutdown for its graceful seconds; and
after its `lifetime`, since a client that never reads shows nothing (its keepalives fit the
socket buffers for days): the client reconnects, as EventSource does by itself."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Generator, Mapping
from types import FrameType
from typing import Any, Protocol, runtime_checkable

import orjson

from globalstore.read.changes import Change, ChangeFeed, Resync

__all__ = [
    "ChangeSource",
    "ChangeStreams",
    "EndsChanges",
    "end_changes_on_exit_signals",
    "on_exit_signals",
    "sse_chunks",
]

_KEEPALIVE = b": keepalive\n\n"


@runtime_checkable
class ChangeSource(Protocol):
    """A store with a change feed and a position."""

    def changes(self, prefix: str | None = None) -> ChangeFeed:
        """A new change feed of the keys that start with `prefix` (None: every key)."""

    def position(self) -> Mapping[int, int]:
        """{partition: next offset already applied}."""


class ChangeStreams:
    """The feeds of the open change streams, so that the server's shutdown ends them: each
    stream sends what its feed holds, then ends."""

    def __init__(self) -> None:
        # A set and a flag, no lock: end_all() runs in a signal handler, which must never
        # wait for a lock the thread it interrupted may hold (set calls are atomic).
        self._feeds: set[ChangeFeed] = set()
        self._ended = False

    def add(self, feed: ChangeFeed) -> None:
        """A stream's feed; ended at once if the shutdown has begun."""
        self._feeds.add(feed)
        if self._ended:
            feed.end()

    def discard(self, feed: ChangeFeed) -> None:
        """A stream that ended."""
        self._feeds.discard(feed)

    def held_bytes(self) -> int:
        """About how many bytes of changes the open streams' feeds hold."""
        return sum(feed.held_bytes() for feed in list(self._feeds))

    def end_all(self) -> None:
        """End every stream, now and from now on."""
        self._ended = True
        for feed in list(self._feeds):
            feed.end()

    def end_on_exit_signals(self) -> None:
        """Call end_all() on SIGTERM and SIGINT (on_exit_signals)."""
        on_exit_signals(self.end_all)


def on_exit_signals(call: Callable[[], None]) -> None:
    """Call `call()` on SIGTERM and SIGINT, before the handler the server installed (which
    begins the shutdown, and then waits for open streams). Only in the main thread, where
    uvicorn handles signals; its own handlers come back when it stops serving. `call` runs
    in a signal handler: it must take no lock."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if callable(previous):
            signal.signal(signum, _chained(call, previous))


def _chained(call: Callable[[], None], previous: Any) -> Any:
    def handler(signum: int, frame: FrameType | None) -> None:
        call()
        previous(signum, frame)

    return handler


class EndsChanges(Protocol):
    """A store whose change feeds can be ended (Store, AsyncStore)."""

    def end_changes(self) -> None:
        """End every change feed, now and from now on; takes no lock."""


def end_changes_on_exit_signals(*stores: EndsChanges) -> None:
    """In an application's lifespan start: end the change feeds of `stores` as soon as
    SIGTERM or SIGINT arrives, so that open change streams (the application's own, the
    mounted API's /v1/changes) end and the server stops instead of waiting for their
    clients to leave."""

    def end() -> None:
        for store in stores:
            store.end_changes()

    on_exit_signals(end)


def sse_chunks(
    store: ChangeSource,
    prefix: str | None,
    keepalive: float,
    most: int,
    streams: ChangeStreams,
    lifetime: float = math.inf,
) -> Generator[bytes, None, None]:
    """The event stream of `store`'s changes under `prefix`, in chunks of at most `most`
    events (what is there already goes in one chunk), until the store closes, `streams`
    ends it or `lifetime` seconds have passed."""
    with store.changes(prefix=prefix) as feed:
        streams.add(feed)
        try:
            yield from _events(store, feed, keepalive, most, time.monotonic() + lifetime)
        finally:
            streams.discard(feed)


def _events(
    store: ChangeSource, feed: ChangeFeed, keepalive: float, most: int, deadline: float
) -> Generator[bytes, None, None]:
    """The start event, then the feed's changes until it ends or the deadline passes."""
    position = {str(p): o for p, o in sorted(store.position().items())}
    yield _event("start", {"position": position})
    while (left := deadline - time.monotonic()) > 0:
        try:
            item = feed.get(min(keepalive, left))
        except StopIteration:
            return
        if item is None:
            if time.monotonic() >= deadline:
                return
            yield _KEEPALIVE
            continue
        events = [_item(item)]
        while len(events) < most:
            more = _ready(feed)
            if more is None:
                break
            events.append(_item(more))
        yield b"".join(events)


def _ready(feed: ChangeFeed) -> Change | Resync | None:
    """The next item if one is there already; None otherwise, also once the feed ended (the
    next get() then ends the stream)."""
    try:
        return feed.get(0)
    except StopIteration:
        return None


def _item(item: Change | Resync) -> bytes:
    if isinstance(item, Resync):
        return _event("resync", {"reason": item.reason})
    body = {"key": item.key, "value": item.value, "partition": item.partition}
    body["offset"] = item.offset
    return _event("change", body, f"{item.partition}:{item.offset}")


def _event(name: str, data: Any, ident: str | None = None) -> bytes:
    head = f"event: {name}\n" if ident is None else f"event: {name}\nid: {ident}\n"
    return head.encode() + b"data: " + orjson.dumps(data) + b"\n\n"
