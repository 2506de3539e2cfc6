"""The change feed's buffer, filter, resync and wakes, without a store."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from globalstore import codec
from globalstore.codec import format_headers
from globalstore.read.changes import Change, Feeds, Resync
from globalstore.storage import Record


def rec(key: str, value: str | None, offset: int, partition: int = 0) -> Record:
    raw = None if value is None else value.encode()
    return (key.encode(), raw, format_headers(), partition, offset, 1_000)


def test_changes_come_decoded_in_order_and_filtered() -> None:
    feeds = Feeds()
    assert not feeds.active  # the writer's one look a batch while nobody subscribes
    every = feeds.subscribe("t", codec.decode)
    some = feeds.subscribe("t", codec.decode, prefix="a", keys=["ab", "b"])
    assert feeds.active
    feeds.publish(object(), [rec("ab", '{"v": 1}', 0), rec("b", "2", 1), rec("ac", None, 2)])
    feeds.publish(object(), [(None, b"1", None, 0, 3, 0), (b"\xff", b"1", None, 0, 4, 0)])
    assert [every.get(0) for _ in range(3)] == [
        Change("ab", {"v": 1}, 0, 0),
        Change("b", 2, 0, 1),
        Change("ac", None, 0, 2),
    ]
    assert every.get(0) is None  # no key, or not UTF-8: the store writes neither
    assert some.get(0) == Change("ab", {"v": 1}, 0, 0)
    assert some.get(0) is None
    every.close()
    some.close()
    assert not feeds.active


def test_a_value_that_does_not_decode_is_left_out() -> None:
    feeds = Feeds()
    feed = feeds.subscribe("t", codec.decode)
    feeds.publish(object(), [rec("a", "{not json", 0), rec("b", "1", 1)])
    assert feed.get(0) == Change("b", 1, 0, 1)


def test_past_its_bound_a_feed_gives_one_resync_then_follows_again() -> None:
    feeds = Feeds()
    feed = feeds.subscribe("t", codec.decode, buffer=3)
    feeds.publish(object(), [rec("a", "1", 0), rec("b", "1", 1)])
    assert feed.get(0) == Change("a", 1, 0, 0)
    feeds.publish(object(), [rec("c", "1", 2), rec("d", "1", 3), rec("e", "1", 4)])  # 4 > 3
    feeds.publish(object(), [rec("f", "1", 5)])  # dropped: the consumer must re-read anyway
    item = feed.get(0)
    assert isinstance(item, Resync) and "3" in item.reason
    assert feed.get(0) is None  # one resync, and "b" is gone with the buffer
    feeds.publish(object(), [rec("g", "1", 6)])
    assert feed.get(0) == Change("g", 1, 0, 6)


def test_only_the_live_copy_publishes() -> None:
    live = object()
    feeds = Feeds(lambda source: source is live)
    feed = feeds.subscribe("t", codec.decode)
    feeds.publish(object(), [rec("a", "1", 0)])  # a rebuild beside the live copy
    feeds.publish(live, [rec("b", "1", 1)])
    assert feed.get(0) == Change("b", 1, 0, 1)
    feeds.resync("swapped")
    assert feed.get(0) == Resync("swapped")


def test_a_waiting_consumer_is_woken_and_ends_with_the_store() -> None:
    feeds = Feeds()
    feed = feeds.subscribe("t", codec.decode)
    got: list[object] = []
    consumer = threading.Thread(target=lambda: got.extend(feed))
    consumer.start()
    time.sleep(0.05)  # asleep on its wake
    feeds.publish(object(), [rec("a", "1", 0)])
    feeds.end()
    consumer.join(5)
    assert not consumer.is_alive()
    assert got == [Change("a", 1, 0, 0)]
    assert list(feeds.subscribe("t", codec.decode)) == []  # after the end: ends at once


def test_an_async_consumer_is_woken_from_another_thread() -> None:
    feeds = Feeds()
    feed = feeds.subscribe("t", codec.decode)

    async def consume() -> list[object]:
        loop = asyncio.get_running_loop()
        # The writer's thread publishes while the loop awaits the feed.
        loop.call_later(0.05, lambda: threading.Thread(target=publish).start())
        return [item async for item in feed]

    def publish() -> None:
        feeds.publish(object(), [rec("a", "1", 0), rec("b", None, 1)])
        time.sleep(0.05)
        feed.close()

    got = asyncio.run(asyncio.wait_for(consume(), 5))
    assert got == [Change("a", 1, 0, 0), Change("b", None, 0, 1)]


def test_close_wakes_a_waiting_consumer() -> None:
    feed = Feeds().subscribe("t", codec.decode)
    threading.Timer(0.05, feed.close).start()
    with pytest.raises(StopIteration):
        feed.get(timeout=5)
