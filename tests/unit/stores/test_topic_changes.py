"""A reader's feed read from the topic: a record is released once the reader shows it
applied, never before; a move to another copy is one resync and a fresh start there."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from globalstore import codec
from globalstore.config import StoreConfig
from globalstore.read.changes import Change, ChangeFeed, Feeds, Resync
from globalstore.stores.topic_changes import TopicChanges
from tests.unit.store_fakes import FakeConsumer, messages
from tests.waiting import eventually

TOPIC = "t"


class Reader:
    """What the feed asks of a SharedStore: its copy and positions, set by the test."""

    def __init__(self) -> None:
        self.copy: object = object()
        self.positions: dict[int, int] = {0: 2, 1: 0}

    def __call__(self) -> tuple[object, Mapping[int, int]]:
        return self.copy, dict(self.positions)


@pytest.fixture
def reading(tmp_path: Path) -> Iterator[tuple[Reader, ChangeFeed]]:
    reader, feeds = Reader(), Feeds()
    consumer = FakeConsumer(TOPIC, {
        0: messages(*((f"a{i}", str(i)) for i in range(10))),
        1: messages(("b0", "0"), ("b1", None), p=1),
    })  # fmt: skip
    config = StoreConfig(TOPIC, "fake:1", tmp_path / "s")
    thread = TopicChanges(config, feeds, reader, lambda _conf: consumer)
    feed = feeds.subscribe(TOPIC, codec.decode)
    thread.start()
    eventually(lambda: bool(consumer.positions), 5, lambda: "the feed's consumer assigned")
    try:
        yield reader, feed
    finally:
        thread.stop()
        thread.join(5)


def taken(feed: ChangeFeed, n: int) -> list[object]:
    got: list[object] = []
    eventually(lambda: got.append(feed.get(0)) or len([g for g in got if g]) >= n, 5,
               lambda: got, 0.01)  # fmt: skip
    return [g for g in got if g is not None]


def test_records_are_released_as_the_reader_shows_them(reading: tuple[Reader, ChangeFeed]) -> None:
    reader, feed = reading
    assert feed.get(0.3) is None  # read from the topic, not applied here yet
    reader.positions = {0: 5, 1: 2}
    got = taken(feed, 5)
    assert sorted(got, key=lambda c: (c.partition, c.offset)) == [  # type: ignore[union-attr]
        Change("a2", 2, 0, 2), Change("a3", 3, 0, 3), Change("a4", 4, 0, 4),
        Change("b0", 0, 1, 0), Change("b1", None, 1, 1),
    ]  # fmt: skip
    assert feed.get(0.2) is None


def test_another_copy_is_one_resync_then_its_positions(reading: tuple[Reader, ChangeFeed]) -> None:
    reader, feed = reading
    reader.copy, reader.positions = object(), {0: 8, 1: 2}  # a restarted writer's copy
    assert taken(feed, 1) == [Resync("the reader moved to another copy of the store")]
    reader.positions = {0: 10, 1: 2}
    assert taken(feed, 2) == [Change("a8", 8, 0, 8), Change("a9", 9, 0, 9)]
    assert feed.get(0.2) is None


def test_the_read_ahead_pauses_at_its_byte_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("globalstore.stores.topic_changes._AHEAD_BYTES", 40_000)
    monkeypatch.setattr("globalstore.stores.topic_changes._READ", 1)
    big = '"' + "x" * 10_000 + '"'
    consumer = FakeConsumer(TOPIC, {0: messages(*((f"a{i}", big) for i in range(50)))})
    reader, feeds = Reader(), Feeds()
    reader.positions = {0: 0}
    thread = TopicChanges(StoreConfig(TOPIC, "fake:1", tmp_path / "s"), feeds, reader,
                          lambda _conf: consumer)  # fmt: skip
    feed = feeds.subscribe(TOPIC, codec.decode)
    thread.start()
    try:
        time.sleep(0.5)  # the reader applies nothing: reading stops at the bound
        assert 4 <= thread._pending_bytes // 10_000 <= 5, thread._pending_bytes
        reader.positions = {0: 50}  # applied: released, and reading goes on to the end
        assert len(taken(feed, 50)) == 50
    finally:
        thread.stop()
        thread.join(5)
