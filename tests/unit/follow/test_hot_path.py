"""The follower's hot path, counted rather than timed. In a busy process every call that may
give the GIL away costs the follower a switch interval or more to get it back
(docs/store.md, "Performance notes"), so while records are queued a follow batch makes ONE
call on the consumer and nothing else that can hand the GIL over: no sleep, no system
call, no socket send, no lock or condition taken, no notify while nobody waits. The store
thread here runs with GlobalStore's real notifier (condition and announcer). And the batch
grows while the follower is behind, within its bounds."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from globalstore import codec
from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError
from globalstore.follow.plan import Plan
from globalstore.follow.prepare import Prepared
from globalstore.follow.sources import NO_SINK, ChangeSink, FollowBatch
from globalstore.follow.thread import StoreThread
from globalstore.read.changes import Change, Feeds
from globalstore.replicas.announce import Announcer
from globalstore.shaping.migrate import Migration
from globalstore.storage import Storage
from globalstore.stores.in_process import InProcessSource
from globalstore.waiting import Wait, wait_until_async
from tests.unit.follow.test_thread import TOPIC, _eventually
from tests.unit.store_fakes import FakeConsumer, Msg, messages

BACKLOG = 5_000


class Tally:
    """What the store thread calls that may hand the GIL over, counted while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.thread: threading.Thread | None = None
        self.calls: Counter[str] = Counter()

    def note(self, what: str) -> None:
        if self.on and threading.current_thread() is self.thread:
            self.calls[what] += 1

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        """A threading.setprofile hook: C calls that may release the GIL, and the condition
        and event methods that wait or wake."""
        if event == "c_call":
            what = _hands_over(arg)
        elif event == "call" and frame.f_code.co_filename == threading.__file__:
            name = frame.f_code.co_name
            what = f"threading.{name}" if name in ("wait", "notify", "notify_all") else None
        else:
            return
        if what is not None:
            self.note(what)


def _hands_over(fn: Any) -> str | None:
    name, module = fn.__name__, getattr(fn, "__module__", None)
    owner = type(getattr(fn, "__self__", None)).__name__
    if module in ("posix", "select", "_socket") or (module, name) == ("time", "sleep"):
        return f"{module}.{name}"
    if owner == "socket" or (owner in ("lock", "RLock") and name in ("acquire", "__enter__")):
        return f"{owner}.{name}"
    return None


class CountingConsumer(FakeConsumer):
    """The fake consumer, its calls noted in a Tally (poll's inner consume not twice)."""

    def __init__(self, tally: Tally, partitions: dict[int, list[Msg]]) -> None:
        super().__init__(TOPIC, partitions)
        self.tally = tally
        self._polling = False
        self.asked: list[int] = []  # num_messages of each consume() call

    def poll(self, timeout: float = -1) -> Msg | None:
        self.tally.note("consumer.poll")
        self._polling = True
        try:
            return super().poll(timeout)
        finally:
            self._polling = False

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        if not self._polling:
            self.tally.note("consumer.consume")
            self.asked.append(num_messages)
        return super().consume(num_messages, timeout)

    def list_topics(self, topic: str, timeout: float = -1) -> Any:
        self.tally.note("consumer.list_topics")
        return super().list_topics(topic, timeout)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[InProcessSource]:
    """A store's source, not started: its notifier (condition, announcer) is what is tested."""
    gs = InProcessSource(StoreConfig(TOPIC, "fake:1", tmp_path / "store"))
    gs._announcer = Announcer(tmp_path / "store", lambda: None)
    yield gs
    gs._announcer.close()


def _follow(
    store: InProcessSource,
    consumer: CountingConsumer,
    config: StoreConfig,
    tally: Tally,
    changes: ChangeSink = NO_SINK,
) -> int:
    """Restore one record, queue BACKLOG more at once, and follow them with the tally on
    from the first backlog batch applied to the last: the batches it applied meanwhile."""
    storage = Storage(config.path)
    storage.initialise(TOPIC, None, 0)
    storage.load(storage.read_meta())
    applied = 0
    real_apply = storage.apply

    def apply(*args: Any, **kwargs: Any) -> Any:
        nonlocal applied
        out = real_apply(*args, **kwargs)
        position = storage.state.positions.get(0, 0)
        if tally.on and out.records:
            applied += 1
        tally.on = 1 < position < 1 + BACKLOG  # from the first backlog batch to the last
        return out

    storage.apply = apply  # type: ignore[method-assign]

    def prepare(_consumer: Any, _stopped: threading.Event, _retry: object) -> Prepared:
        migration = Migration(storage, config.value_formats(), TOPIC)
        migration.begin()
        return Prepared(Plan({0: 0}, {0: 1}, True), migration)

    thread = StoreThread(
        config, storage, (), store._notify_applied,
        consumer_factory=lambda _conf: consumer, prepare=prepare, feeds=changes,
    )  # fmt: skip
    tally.thread = thread
    threading.setprofile(tally.profile)
    try:
        thread.start()
    finally:
        threading.setprofile(None)  # threads started from here on are not profiled
    try:
        assert thread.ready.wait(10)
        consumer.asked.clear()  # the restore's
        consumer.partitions[0] += messages(*((f"k{i}", '"v"') for i in range(BACKLOG)), start=1)
        _eventually(lambda: storage.state.positions.get(0) == 1 + BACKLOG, "the backlog applied")
    finally:
        thread.stop()
        thread.join()
        storage.close()
    return applied


def _config(path: Path, **settings: Any) -> StoreConfig:
    return StoreConfig(TOPIC, "fake:1", path, native_restore=False, **settings)


def test_a_batch_makes_one_consumer_call_and_hands_nothing_else_over(
    store: InProcessSource, tmp_path: Path
) -> None:
    tally = Tally()
    consumer = CountingConsumer(tally, {0: messages(("a", "1"))})
    config = _config(tmp_path / "store", follow_batch_size=50, follow_batch_max=400)
    batches = _follow(store, consumer, config, tally)
    assert batches >= 10  # enough batches for the count to mean something
    assert dict(tally.calls) == {"consumer.consume": batches}


def test_a_change_feed_adds_no_call_that_hands_the_gil_over(
    store: InProcessSource, tmp_path: Path
) -> None:
    """A feed whose consumer sleeps between batches is woken by releasing a lock (which never
    waits), and its buffer takes each batch by an append."""
    tally, feeds = Tally(), Feeds()
    got: list[object] = []
    feed = feeds.subscribe(TOPIC, codec.decode)
    consumer_thread = threading.Thread(target=lambda: got.extend(feed))
    consumer_thread.start()
    consumer = CountingConsumer(tally, {0: messages(("a", "1"))})
    config = _config(tmp_path / "store", follow_batch_size=50, follow_batch_max=400)
    try:
        batches = _follow(store, consumer, config, tally, feeds)
    finally:
        feeds.end()
        consumer_thread.join(10)
    assert batches >= 10
    assert dict(tally.calls) == {"consumer.consume": batches}
    assert got[0] == Change("a", 1, 0, 0)  # subscribed before the restore: it is there too
    assert got[1:] == [Change(f"k{i}", "v", 0, 1 + i) for i in range(BACKLOG)]


def test_a_waiter_is_still_woken(store: InProcessSource) -> None:
    """The notify skipped while nobody waits is made while someone does."""
    woken = threading.Event()

    def wait() -> None:
        with store._published:
            if store._published.wait(10):
                woken.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    _eventually(lambda: store._published._inside == 1, "the waiter waiting")
    store._notify_applied()
    waiter.join(10)
    assert woken.is_set()


def test_a_coroutine_waiting_is_woken_too(store: InProcessSource) -> None:
    """An asyncio waiter (aio.py) is woken through its loop by the same notify, and takes
    its bell down after: the notify costs nothing again."""
    applied = False

    async def wait() -> bool:
        waiting = asyncio.create_task(
            wait_until_async(Wait(store._published, lambda: applied), timeout=10)
        )
        while not store._published._bells:
            await asyncio.sleep(0.01)
        threading.Thread(target=notify).start()
        return await waiting

    def notify() -> None:
        nonlocal applied
        applied = True
        store._notify_applied()

    assert asyncio.run(wait())
    assert not store._published._bells


def test_the_batch_doubles_while_full_up_to_its_bound(
    store: InProcessSource, tmp_path: Path
) -> None:
    consumer = CountingConsumer(Tally(), {0: messages(("a", "1"))})
    config = _config(tmp_path / "store", follow_batch_size=50, follow_batch_max=400)
    _follow(store, consumer, config, Tally())
    asked = consumer.asked
    assert asked[:4] == [50, 100, 200, 400]  # each batch came back full
    assert max(asked) == 400 and asked.count(400) >= 10  # the bound, held while behind


def _batch(n: int, value_bytes: int) -> tuple[int, Callable[[], int]]:
    """What FollowBatch.after is told of a batch of n values of `value_bytes` each."""
    return n, lambda: n * value_bytes


def test_the_batch_keeps_within_its_bytes() -> None:
    size = FollowBatch(
        StoreConfig(TOPIC, "fake:1", "p", follow_batch_size=10, follow_batch_max_bytes=8_000)
    )
    size.after(*_batch(10, 100))  # 1,000 bytes: twice fits
    assert size.records == 20
    size.after(*_batch(20, 100))  # 2,000
    assert size.records == 40
    size.after(*_batch(40, 100))  # 4,000: twice as many would be 8,000, still within
    assert size.records == 80
    size.after(*_batch(80, 100))  # 8,000: twice would not fit, stays
    assert size.records == 80
    size.after(*_batch(80, 1_000))  # larger values: 80,000 bytes, over the bound
    assert size.records == 40
    size.after(*_batch(11, 100))  # more than a quarter full: kept
    assert size.records == 40
    for _ in range(5):  # caught up: back down, never below follow_batch_size
        size.after(*_batch(0, 0))
    assert size.records == 10


@pytest.mark.parametrize(("least", "most"), [(0, 10), (10, 5), (1, 2_000_000), (1.5, 10)])
def test_follow_batch_bounds_are_checked(least: Any, most: Any) -> None:
    with pytest.raises(ConfigurationError, match="follow_batch_size and follow_batch_max"):
        StoreConfig(TOPIC, "fake:1", "p", follow_batch_size=least, follow_batch_max=most)
