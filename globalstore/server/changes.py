"""GET /v1/changes: a store's change feed (read/changes.py) as server-sent events.

The stream opens with `event: start` naming the store's position when the feed began (the
changes that follow are those applied after it; one at or just before it may repeat what the
position covers), then one `event: change` per change, its `id` "partition:offset", `data`
{key, value, partition, offset} (value null for a delete). A client that reads too slowly
for the feed's buffer gets one `event: resync` and must re-read what it cares about; the
changes after it are complete again. A comment line every `keepalive` seconds while nothing
changes keeps proxies from closing the stream and shows a client that left. The stream ends
when the store closes."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any, Protocol, runtime_checkable

import orjson

from globalstore.read.changes import Change, ChangeFeed, Resync

__all__ = ["ChangeSource", "sse_chunks"]

_KEEPALIVE = b": keepalive\n\n"


@runtime_checkable
class ChangeSource(Protocol):
    """A store with a change feed and a position."""

    def changes(self, prefix: str | None = None) -> ChangeFeed:
        """A new change feed of the keys that start with `prefix` (None: every key)."""

    def position(self) -> Mapping[int, int]:
        """{partition: next offset already applied}."""


def sse_chunks(
    store: ChangeSource, prefix: str | None, keepalive: float, most: int
) -> Generator[bytes, None, None]:
    """The event stream of `store`'s changes under `prefix`, in chunks of at most `most`
    events (what is there already goes in one chunk)."""
    with store.changes(prefix=prefix) as feed:
        position = {str(p): o for p, o in sorted(store.position().items())}
        yield _event("start", {"position": position})
        while True:
            try:
                item = feed.get(keepalive)
            except StopIteration:
                return
            if item is None:
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
