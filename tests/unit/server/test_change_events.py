"""The event stream of /v1/changes, from a feed without a store: start, changes in chunks,
one resync past the buffer, keepalives while idle, the end with the store."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping

from globalstore import codec
from globalstore.codec import format_headers
from globalstore.read.changes import Change, ChangeFeed, Feeds, Resync
from globalstore.server.changes import ChangeStreams, sse_chunks


class Store:
    def __init__(self) -> None:
        self.feeds = Feeds()

    def changes(self, prefix: str | None = None) -> ChangeFeed:
        return self.feeds.subscribe("t", codec.decode, prefix, buffer=3)

    def position(self) -> Mapping[int, int]:
        return {1: 7, 0: 5}


def publish(store: Store, *offsets: int) -> None:
    records = [(b"k%d" % o, b"%d" % o, format_headers(), 0, o, 0) for o in offsets]
    store.feeds.publish(object(), records)


def test_the_stream_of_a_feed() -> None:
    store = Store()
    chunks = sse_chunks(store, "k", keepalive=0.01, most=2, streams=ChangeStreams())
    assert next(chunks) == b'event: start\ndata: {"position":{"0":5,"1":7}}\n\n'
    publish(store, 5, 6, 7)
    assert next(chunks) == (  # what is there goes in one chunk, up to `most` events
        b'event: change\nid: 0:5\ndata: {"key":"k5","value":5,"partition":0,"offset":5}\n\n'
        b'event: change\nid: 0:6\ndata: {"key":"k6","value":6,"partition":0,"offset":6}\n\n'
    )
    assert next(chunks).startswith(b"event: change\nid: 0:7\n")
    assert next(chunks) == b": keepalive\n\n"
    publish(store, 8)
    publish(store, 9, 10, 11)  # a slow client: past the buffer of 3
    assert next(chunks) == (
        b'event: resync\ndata: {"reason":"more than 3 changes waited for this consumer"}\n\n'
    )
    store.feeds.end()
    assert list(chunks) == []  # the store closed: the stream ends


def test_the_shutdown_ends_open_streams_and_those_opened_after_it() -> None:
    store, streams = Store(), ChangeStreams()
    chunks = sse_chunks(store, None, keepalive=0.2, most=10, streams=streams)
    assert next(chunks).startswith(b"event: start")
    publish(store, 1)
    streams.end_all()  # what is held still goes out, then the stream ends (no keepalives)
    assert b"event: change" in next(chunks) and list(itertools.islice(chunks, 3)) == []
    later = sse_chunks(store, None, keepalive=0.2, most=10, streams=streams)
    assert next(later).startswith(b"event: start")
    assert list(itertools.islice(later, 3)) == []


def test_a_feed_resyncs_past_its_byte_bound_and_says_what_it_holds() -> None:
    feeds = Feeds()
    feed = feeds.subscribe("t", codec.decode, buffer=1_000, buffer_bytes=50_000)
    big = b'"' + b"x" * 10_000 + b'"'
    for o in range(4):
        feeds.publish(object(), [(b"k%d" % o, big, format_headers(), 0, o, 0)])
    assert 40_000 < feed.held_bytes() < 50_000  # four records of about 10,000 bytes
    feeds.publish(object(), [(b"k4", big, format_headers(), 0, 4, 0)])  # the fifth is past it
    item = feed.get(0)
    assert isinstance(item, Resync) and "50000 bytes" in item.reason
    assert feed.held_bytes() == 0
    feeds.publish(object(), [(b"k5", big, format_headers(), 0, 5, 0)])
    assert feed.get(0) == Change("k5", "x" * 10_000, 0, 5)  # complete again after it
    assert feed.held_bytes() == 0


def test_a_stream_ends_after_its_lifetime() -> None:
    store = Store()
    began = time.monotonic()
    chunks = sse_chunks(store, None, keepalive=0.05, most=10, streams=ChangeStreams(), lifetime=0.3)
    got = list(chunks)  # start, keepalives, then the end
    assert 0.3 <= time.monotonic() - began < 1.0
    assert got[0].startswith(b"event: start") and set(got[1:]) == {b": keepalive\n\n"}
