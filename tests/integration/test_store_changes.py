"""The change feed of a GlobalStore on a real broker: every change of a known stream arrives
exactly once, in offset order per partition, to `for` and `async for` consumers alike; a
consumer that falls behind gets one Resync and never a silent gap; closing ends it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from globalstore import GlobalStore
from globalstore.read.changes import Change, ChangeFeed, Resync
from globalstore.read.protocols import reaches
from tests.integration.change_support import Sent, check_exactly, ends, produce_known, stream


def _until(
    feed: ChangeFeed, store: GlobalStore, wanted: Callable[[], Mapping[int, int] | bool]
) -> list[Change]:
    """The changes taken from `feed` until the store has applied `wanted()` (False: not
    known yet) and the feed is empty."""
    got: list[Change] = []
    reached = False
    while True:
        item = feed.get(timeout=0.2 if reached else 0.5)
        if item is None:
            if reached:
                return got  # applied, and nothing more came
            target = wanted()
            reached = target is not False and reaches(store.position(), target)
            continue
        assert isinstance(item, Change), item
        got.append(item)


def test_every_change_arrives_once_in_order_sync_and_async(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    produce_known(kafka_bootstrap, topic, stream(100))  # restored, not in the feed
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        starts = store.position()
        sync_feed, async_feed = store.changes(), store.changes()
        some = store.changes(prefix="k1", keys=["k1", "k10", "k2"])
        async_got: list[Change] = []

        async def consume() -> None:
            async with async_feed:
                async for item in async_feed:
                    assert isinstance(item, Change), item
                    async_got.append(item)

        runner = threading.Thread(target=asyncio.run, args=(consume(),))
        runner.start()
        sent = produce_known(kafka_bootstrap, topic, stream(3_000))
        with sync_feed:
            check_exactly(_until(sync_feed, store, lambda: ends(sent)), sent, starts)
        with some:
            wanted = {w: kv for w, kv in sent.items() if kv[0] in ("k1", "k10")}
            check_exactly(_until(some, store, lambda: ends(sent)), wanted, starts)
    runner.join(10)  # the store's close ends the async feed
    assert not runner.is_alive()
    check_exactly(async_got, sent, starts)


def test_a_slow_consumer_gets_one_resync_and_no_silent_gap(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store, store.changes(
        buffer=100
    ) as feed:  # fmt: skip
        starts = store.position()
        first = produce_known(kafka_bootstrap, topic, stream(1_000))
        assert store.wait_for(ends(first), timeout=30)
        before: list[Change] = []
        item = feed.get(timeout=5)
        while isinstance(item, Change):
            before.append(item)
            item = feed.get(timeout=5)
        assert isinstance(item, Resync), item
        assert "100" in item.reason
        # What came before the resync is a gapless start of the stream in each partition.
        assert len(before) <= 100
        for change in before:
            assert first[(change.partition, change.offset)] == (change.key, change.value)
            earlier = [c.offset for c in before if c.partition == change.partition]
            assert earlier == list(range(starts.get(change.partition, 0), max(earlier) + 1))
        # After the resync the consumer re-reads, and every change from then on arrives.
        resynced = store.position()
        second: list[Sent] = []
        producing = threading.Thread(
            target=lambda: second.append(produce_known(kafka_bootstrap, topic, stream(500)))
        )
        producing.start()  # while the consumer keeps up
        got = _until(feed, store, lambda: not producing.is_alive() and ends(second[0]))
        check_exactly(got, second[0], resynced)
        assert feed.get(timeout=0.2) is None  # one resync, not one per batch
    assert list(feed) == []  # closed: iteration ends
