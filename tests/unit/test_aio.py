"""The asyncio faces without a broker: AsyncSharedStore beside a writer made of its parts
(its waits woken while the loop runs on, partitions checked), and AsyncGlobalStore's start
failing as GlobalStore's does, releasing what it took."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from globalstore import BrokerUnavailable, StartTimeout, codec
from globalstore.aio import AsyncGlobalStore, AsyncSharedStore, FeedOpening
from globalstore.read.changes import Change, ChangeFeed, Feeds, Resync
from globalstore.storage import Storage
from tests.unit.stores.test_shared_store_parts import Writer


def test_a_shared_reader_answers_and_its_waits_are_woken(tmp_path: Path) -> None:
    writer = Writer(tmp_path, Storage(tmp_path))
    writer.write(("a", "1"), start=0)

    async def main() -> tuple[bool, int, float]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        async with AsyncSharedStore(tmp_path) as shared:
            assert shared["a"] == 1 and shared.get_many(["a", "b"]) == {"a": 1}
            assert shared.position() == {0: 1} and shared.status().topic == "t"
            with pytest.raises(ValueError, match="has no partition 3"):
                await shared.wait_for({3: 1}, timeout=5)
            ticker = asyncio.create_task(tick())
            later = threading.Timer(0.3, lambda: writer.write(("b", "2"), start=1))
            began = time.monotonic()
            later.start()
            reached = await shared.wait_for({"0": 2}, timeout=10)
            waited = time.monotonic() - began
            ticker.cancel()
            assert shared["b"] == 2 and await shared.count() == 2
            return reached, ticks, waited

    try:
        reached, ticks, waited = asyncio.run(main())
    finally:
        writer.close()
    assert reached and 0.3 <= waited < 5
    assert ticks >= 10  # the loop ran other tasks while it waited


def test_a_shared_reader_without_a_writer_times_out(tmp_path: Path) -> None:
    async def main() -> None:
        store = AsyncSharedStore(tmp_path)
        with pytest.raises(StartTimeout, match="no writer made the store"):
            await store.start(timeout=0.3)
        await store.close()

    asyncio.run(main())


def test_a_failed_start_releases_the_store(tmp_path: Path) -> None:
    async def main() -> None:
        store = AsyncGlobalStore("t", "127.0.0.1:1", tmp_path / "s", poll_timeout=0.05)
        with pytest.raises(BrokerUnavailable, match=r"no Kafka broker answered at 127\.0\.0\.1:1"):
            await store.start(timeout=1)
        assert store.status().state == "closed"
        await store.start(timeout=1, wait=False)  # the lock was released: it starts again
        assert not await store.wait_until_ready(timeout=0.2)
        await store.close()
        assert store.status().state == "closed"

    asyncio.run(main())


def test_changes_are_read_with_async_for_without_an_await_first() -> None:
    """`async for change in store.changes()`, as with aiokafka or websockets: the feed opens
    (in a thread) at the first step; `async with` closes it; `await` gives the feed."""
    feeds = Feeds()
    opened: list[threading.Thread] = []

    def open_feed() -> ChangeFeed:
        opened.append(threading.current_thread())
        return feeds.subscribe("t", codec.decode)

    async def main() -> tuple[list[Change | Resync], ChangeFeed]:
        changes = FeedOpening(open_feed)
        assert opened == []  # nothing opened until the first step
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, feeds.publish, None, [(b"a", b"1", None, 0, 7, 1)])
        loop.call_later(0.10, feeds.end)
        got = [change async for change in changes]
        async with FeedOpening(open_feed) as feed:
            assert isinstance(feed, ChangeFeed)
        return got, await FeedOpening(open_feed)

    got, awaited = asyncio.run(main())
    assert got == [Change("a", 1, 0, 7)]
    assert len(opened) == 3 and threading.main_thread() not in opened  # never on the loop
    assert isinstance(awaited, ChangeFeed)
