"""The C loop following a plain store (native_source.NativeSource after follow()), driven by a fake
of the C loop's consumer: one consume a batch that waits only while idle, the batch growing
with the backlog, the live-key count exact, the thread's consumer polled at most once a
second, and the C consumer's statistics handed on. The C loop itself is checked against the
Python loop on a real broker (tests/integration/test_native_restore.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from globalstore import Shape
from globalstore.config import StoreConfig
from globalstore.follow.native_source import NativeSource, follows_in_c
from globalstore.storage import Storage
from globalstore.storage.records import Put
from globalstore.storage.versions import PREFIX, version_key

TOPIC = "t"


class FakeLoop:
    """The C loop's consumer: each fill() writes the next queued (key, value) pairs, up to
    `limit`, and notes how it was asked."""

    def __init__(self) -> None:
        self.queued: list[tuple[bytes, bytes | None]] = []
        self.offset = 0
        self.limit, self.first = 1_000, False
        self.asked: list[tuple[int, float, bool]] = []  # (limit, timeout, first) per fill
        self.reported: list[str] = []
        self.events: list[Any] = []

    def fill(
        self,
        put: Put,
        delete: Any,
        nexts: dict[int, int],
        skipped: list[tuple[int, int, bytes]],
        timeout: float,
        record_deletes: bool = False,
    ) -> int:
        self.asked.append((self.limit, timeout, self.first))
        taken, self.queued = self.queued[: self.limit], self.queued[self.limit :]
        for key, value in taken:
            if value is None:
                delete(key, 0, self.offset, 0) if record_deletes else delete(key)
            else:
                put(key, b"\x01" * 10 + bytes(4) + self.offset.to_bytes(8, "big") + value)
            self.offset += 1
            nexts[0] = self.offset
        return len(taken)

    def held(self) -> int:
        return 10 * len(self.asked)

    def oldest(self) -> int | None:
        return None  # its records carry no timestamp

    def stats(self) -> str | None:
        return self.reported.pop() if self.reported else None

    def close(self) -> None:
        pass


class PolledConsumer:
    def __init__(self) -> None:
        self.polls = 0

    def poll(self, timeout: float) -> None:
        self.polls += 1


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(tmp_path / "store")
    s.initialise(TOPIC, None, 0)
    s.load(s.read_meta())
    yield s
    s.close()


def _source(**settings: Any) -> tuple[NativeSource, FakeLoop, PolledConsumer, list[str]]:
    config = StoreConfig(
        TOPIC, "fake:1", "p", follow_batch_size=10, follow_batch_max=40, **settings
    )
    loop, consumer, stats = FakeLoop(), PolledConsumer(), []
    source = NativeSource(loop, consumer, config, stats.append, can_follow=follows_in_c(config))  # type: ignore[arg-type]
    return source, loop, consumer, stats


def test_following_waits_only_while_idle_and_grows_with_the_backlog(storage: Storage) -> None:
    source, loop, consumer, _ = _source()
    assert source.follow()
    storage.begin_recount()
    while storage.recount_step(100) is None:
        pass
    loop.queued = [(f"k{i}".encode(), b"v") for i in range(100)]
    for _ in range(6):
        source.apply(storage, 0)
    idle = source.config.poll_timeout
    assert loop.asked == [
        (10, idle, True),  # idle: waits for the first record, takes what is queued with it
        (20, 0.0, True),  # full: twice as many, without waiting
        (40, 0.0, True),
        (40, 0.0, True),  # the bound; 30 came, more than a quarter: kept
        (40, 0.0, True),  # nothing came: halved, and idle again
        (20, idle, True),
    ]
    assert consumer.polls == 1  # the thread's consumer: at most once a second
    assert storage.state.count == 100


def test_the_count_stays_exact_across_overwrites_and_deletes(storage: Storage) -> None:
    source, loop, _, _ = _source()
    source.follow()
    storage.begin_recount()
    while storage.recount_step(100) is None:
        pass
    loop.queued = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", None), (b"b", None)]
    applied = source.apply(storage, 0).applied
    assert applied.present == {b"a": True, b"b": False, b"c": False}
    assert storage.state.count == 1


def test_a_store_with_history_following_in_c_keeps_each_replaced_version(
    storage: Storage,
) -> None:
    storage.history.define(3_600_000, 0)
    source, loop, _, _ = _source(history=3600)
    assert source.follow()
    loop.queued = [(b"a", b"1"), (b"a", b"2"), (b"a", None), (b"b", b"1")]
    source.apply(storage, 0)
    assert storage.get(b"a") is None and storage.history.get(b"a", 0) is None
    index = storage.index
    assert index is not None
    versions = [e for e, _ in index.items_from(PREFIX) if e.startswith(PREFIX)]
    # The values replaced and the tombstone; b's only value is its current one.
    assert versions == [version_key(b"a", 0, 2), version_key(b"a", 0, 1), version_key(b"a", 0, 0)]
    assert storage.history.get(b"b", 2**63 - 1) == storage.get(b"b") is not None


def test_the_c_consumers_statistics_reach_the_health(storage: Storage) -> None:
    source, loop, _, stats = _source()
    source.follow()
    loop.reported = ['{"brokers": {}}']
    source.apply(storage, 0)
    assert stats == ['{"brokers": {}}']


@pytest.mark.parametrize(
    "settings",
    [
        {"transform": lambda _k, v: v},
        {"indexes": {"by_a": lambda _k, v: v["a"]}},
        {"ttl": 60.0},
    ],
)
def test_a_store_with_user_functions_or_a_ttl_is_followed_by_the_python_loop(
    settings: dict[str, Any],
) -> None:
    source, _, _, _ = _source(**settings)
    assert not source.follow()
    assert not source.following


def test_the_c_loop_follows_a_store_that_runs_no_python_function_per_record() -> None:
    def by_x(key: str, value: Any) -> str:
        return str(value)

    def config(**settings: Any) -> StoreConfig:
        return StoreConfig(TOPIC, "fake:1", "p", **settings)

    assert follows_in_c(config())
    assert follows_in_c(config(indexes={"by_x": "x"}, transform=Shape(fields=["x"])))
    assert not follows_in_c(config(indexes={"by_x": by_x}))
    assert not follows_in_c(config(transform=lambda k, v: v))
    assert not follows_in_c(config(ttl=60))
    assert follows_in_c(config(history=3600))
