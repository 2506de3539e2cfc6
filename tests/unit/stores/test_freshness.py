"""max_staleness: a store that knows it last held the topic's end longer ago than that is not
ready and says why; a store behind is never fresh. The rule alone, then a GlobalStore on a
fake broker (its consumer reports librdkafka's statistics) that falls behind, and one whose
follower is held up. tests/integration/test_store_freshness.py does it on a real broker."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import click
import orjson
import pytest
from click.testing import CliRunner

from globalstore.cli.target import StoreTarget, store_options
from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError
from globalstore.follow.plan import Plan
from globalstore.follow.prepare import Prepared
from globalstore.listeners import StoreListener
from globalstore.read.protocols import freshness
from globalstore.shaping.migrate import Migration
from globalstore.status import State
from globalstore.storage import Storage
from globalstore.stores.in_process import InProcessSource
from globalstore.stores.store import Store
from tests.unit.follow.test_thread import TOPIC, _eventually
from tests.unit.store_fakes import FakeConsumer, Msg, messages


@pytest.mark.parametrize(
    ("staleness", "connected", "lag", "bound", "fresh"),
    [
        (0.0, True, {0: 0}, None, True),  # holds the end
        (0.0, True, {0: 0}, 5.0, True),
        (4.0, True, {0: 7}, 5.0, True),  # within the bound
        (6.0, True, {0: 7}, 5.0, False),
        (0.5, True, {0: 7}, None, False),  # behind, no bound: never fresh
        (None, True, {}, None, False),  # never held it
        (None, True, {}, 5.0, False),
        (6.0, False, {0: 0}, 5.0, False),
    ],
)
def test_the_rule(
    staleness: float | None, connected: bool, lag: dict[int, int], bound: float | None, fresh: bool
) -> None:
    is_fresh, why = freshness(staleness, connected, lag, bound)
    assert is_fresh is fresh
    assert (why is not None) is (not fresh and bound is not None)  # a reason past the bound


def test_the_reason_says_how_far_and_why() -> None:
    _, behind = freshness(6.25, True, {0: 7, 1: 3}, 5.0)
    assert behind == (
        "it last knew it held the topic's end 6.2 s ago (max_staleness 5 s); "
        "10 records behind the end as last known"
    )
    _, away = freshness(9.0, False, {0: 0}, 5.0)
    assert away is not None and away.endswith("; not connected to the broker")


@pytest.mark.parametrize("bad", [0, -1, float("inf"), "5", True])
def test_max_staleness_is_checked(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_staleness must be a positive number"):
        StoreConfig(TOPIC, "fake:1", "p", max_staleness=bad)


class StatsConsumer(FakeConsumer):
    """The fake consumer with librdkafka's statistics callback: at each call, the topic's end
    is the records it holds and its leader is up. `withheld`: it delivers nothing."""

    def __init__(self, conf: dict[str, Any], partitions: dict[int, list[Msg]]) -> None:
        super().__init__(TOPIC, partitions)
        self._stats_cb = conf["stats_cb"]
        self.withheld = False

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        ends = {str(p): {"leader": 1, "ls_offset": len(r)} for p, r in self.partitions.items()}
        up = {"b": {"nodeid": 1, "state": "UP"}}
        stats = {"topics": {TOPIC: {"partitions": ends}}, "brokers": up}
        self._stats_cb(orjson.dumps(stats).decode())
        if self.withheld:
            time.sleep(0.005)
            return []
        return super().consume(num_messages, timeout)


class FakeBrokerStore(Store):
    """A store whose thread reads a StatsConsumer over `partitions` (no broker)."""

    consumer: StatsConsumer  # once the thread has made it

    def __init__(self, config: StoreConfig, listeners: tuple[StoreListener, ...]) -> None:
        self.partitions: dict[int, list[Msg]] = {0: messages(("a", "1"))}
        super().__init__(InProcessSource(
            config, listeners, consumer_factory=self._consumer, prepare=self._prepare))  # fmt: skip

    def _consumer(self, conf: dict[str, Any]) -> StatsConsumer:
        self.consumer = StatsConsumer(conf, self.partitions)
        return self.consumer

    def _prepare(self, config: StoreConfig, storage: Storage) -> Any:
        def prepare(_consumer: Any, _stopped: threading.Event, _retry: object) -> Prepared:
            storage.initialise(TOPIC, None, 0)
            storage.load(storage.read_meta())
            migration = Migration(storage, config.value_formats(), TOPIC)
            migration.begin()
            ends = {p: len(records) for p, records in self.partitions.items()}
            return Prepared(Plan(dict.fromkeys(ends, 0), ends, True), migration)

        return prepare


def _store(
    tmp_path: Path, listeners: tuple[StoreListener, ...] = (), **settings: Any
) -> FakeBrokerStore:
    config = StoreConfig(TOPIC, "fake:1", tmp_path, native_restore=False, poll_timeout=0.005,
                         **settings)  # fmt: skip
    return FakeBrokerStore(config, listeners).start(10)


def test_a_store_behind_longer_than_max_staleness_is_not_ready_until_it_catches_up(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path, max_staleness=0.3)
    try:
        _eventually(lambda: store.status().fresh, "fresh once restored")
        assert store.status().ready and store.status().stale is None
        store.consumer.withheld = True  # the topic grows; its records do not come
        store.partitions[0] += messages(("b", "2"), start=1)
        _eventually(lambda: store.status().stale is not None, "stale past max_staleness")
        status = store.status()
        assert status.state is State.RUNNING and not status.ready and not status.fresh
        assert status.staleness_seconds is not None and status.staleness_seconds > 0.3
        assert status.stale is not None and "1 records behind" in status.stale
        assert store.get("a") == 1  # it still answers
        store.consumer.withheld = False
        _eventually(lambda: store.status().ready, "ready once caught up")
        assert store.status().fresh and store.get("b") == 2
    finally:
        store.close()


def test_without_a_bound_a_store_behind_stays_ready_but_is_not_fresh(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        _eventually(lambda: store.status().fresh, "fresh once restored")
        store.consumer.withheld = True
        store.partitions[0] += messages(("b", "2"), start=1)
        _eventually(lambda: store.lag() == {0: 1}, "the end known to have moved")
        status = store.status()
        assert status.ready and not status.fresh and status.stale is None
    finally:
        store.close()


class HeldUp(StoreListener):
    """A listener that keeps the store thread in on_changes while `hold` is set."""

    def __init__(self) -> None:
        self.hold = threading.Event()

    def on_changes(self, topic: str, upserted: list[str], deleted: list[str]) -> None:
        while self.hold.is_set():
            time.sleep(0.01)


def test_a_follower_held_up_does_not_report_itself_fresh(tmp_path: Path) -> None:
    """It applied all it was given, but has not looked at the topic's end since."""
    listener = HeldUp()
    store = _store(tmp_path, (listener,), max_staleness=0.5)
    try:
        _eventually(lambda: store.status().ready, "ready")
        listener.hold.set()
        store.partitions[0] += messages(("b", "2"), start=1)
        _eventually(lambda: store.status().stale is not None, "stale while held up", 15)
        assert not store.status().fresh
        listener.hold.clear()
        _eventually(lambda: store.status().ready, "ready once it looks again")
    finally:
        listener.hold.clear()
        store.close()


def test_every_store_command_takes_max_staleness(tmp_path: Path) -> None:
    seen: list[float | None] = []

    @click.command()
    @store_options
    def probe(target: StoreTarget) -> None:
        seen.append(target.config.max_staleness)

    where = ["--topic", "t", "--path", str(tmp_path)]
    assert CliRunner().invoke(probe, [*where, "--max-staleness", "2.5"]).exit_code == 0
    assert CliRunner().invoke(probe, where).exit_code == 0
    assert seen == [2.5, None]  # off unless given
    refused = CliRunner().invoke(probe, [*where, "--max-staleness", "0"])
    assert refused.exit_code == 2 and "--max-staleness" in refused.output
