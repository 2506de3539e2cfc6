"""History on a real broker: what a cold restore from the topic can answer (only from the
moment it began: compaction may have removed what came before), versions written while
following answered exactly as of any time after that (two partitions, a partition's
timestamps going backwards, tombstones), a warm restart moving the horizon to its own
start, and a ttl applied at the time asked."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore import (
    GlobalStore,
    HistoryUnavailable,
    SharedStore,
    SwitchingStore,
    end_offsets,
)
from globalstore.storage import Storage
from globalstore.storage.meta import K_HISTORY_LAYOUT
from tests.conftest import TopicFactory
from tests.integration.store_support import producer
from tests.integration.test_serve_snapshot import _Starts
from tests.snapshot_peer import Peer, snapshot_bytes

HOUR = 3600.0


def _produce(bootstrap: str, topic: str, records: Iterable[tuple[str, Any, int, int]]) -> None:
    """(key, value or None, partition, timestamp ms), each acknowledged before the next."""
    p = producer(bootstrap)
    for key, value, partition, ts in records:
        raw = None if value is None else orjson.dumps(value)
        p.produce(topic, key=key.encode(), value=raw, partition=partition, timestamp=ts)
        assert p.flush(30) == 0


def _caught_up(store: GlobalStore, bootstrap: str, topic: str) -> None:
    assert store.wait_for(end_offsets(bootstrap, topic), timeout=30)


def test_cold_restore_answers_from_its_start_and_following_answers_every_version(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    before = int(time.time() * 1000) - 60_000
    # Three versions of "a" a minute ago: a compacted topic may keep only the last one, so
    # a store restored from it must not answer for that minute.
    _produce(kafka_bootstrap, topic, [("a", {"v": i}, 0, before + i) for i in range(3)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR) as store:
        began = store.status().history
        assert began is not None and began.complete_from is not None
        assert began.oldest >= began.complete_from > before / 1000
        with pytest.raises(HistoryUnavailable) as caught:
            store.get("a", as_of=(before + 1) / 1000)
        assert caught.value.oldest is not None and caught.value.oldest >= began.complete_from
        assert "oldest time it can answer" in str(caught.value)
        start = int(began.complete_from * 1000)
        # At or after its start it answers with what the topic held then.
        assert store.get("a", as_of=start / 1000) == {"v": 2}

        # Following: versions at known times, in two partitions; in partition 1 a record
        # whose timestamp goes back (a producer's clock), and a tombstone.
        t = start + 10_000
        _produce(
            kafka_bootstrap,
            topic,
            [
                ("a", {"v": 3}, 0, t + 100),
                ("b", {"v": 1}, 1, t + 200),
                ("b", {"v": 2}, 1, t + 150),  # later offset, earlier timestamp
                ("a", None, 0, t + 300),
                ("a", {"v": 4}, 0, t + 400),
            ],
        )
        _caught_up(store, kafka_bootstrap, topic)
        seconds = [(t + ms) / 1000 for ms in (0, 100, 149, 150, 199, 200, 300, 399, 400)]
        assert [store.get("a", as_of=s) for s in seconds] == [
            {"v": 2}, {"v": 3}, {"v": 3}, {"v": 3}, {"v": 3}, {"v": 3}, None, None, {"v": 4}
        ]  # fmt: skip
        # In one partition the later offset wins once its timestamp is reached.
        assert [store.get("b", as_of=s) for s in seconds] == [
            None, None, None, {"v": 2}, {"v": 2}, {"v": 2}, {"v": 2}, {"v": 2}, {"v": 2}
        ]  # fmt: skip
        assert dict(store.items(as_of=(t + 320) / 1000)) == {"b": {"v": 2}}
        assert dict(store.items(as_of=(t + 400) / 1000)) == dict(store.items())
        entry = store.get_entry("a", as_of=(t + 120) / 1000)
        assert entry is not None and (entry.partition, entry.timestamp) == (0, t + 100)
        assert store.get_many(["a", "b"], as_of=(t + 160) / 1000) == {"a": {"v": 3}, "b": {"v": 2}}

    # A warm restart resumes from its offsets; what was written while it was away may be
    # compacted, so it answers only from its own start on.
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR) as store:
        again = store.status().history
        assert again is not None and again.complete_from is not None
        assert again.complete_from * 1000 > start
        with pytest.raises(HistoryUnavailable):
            store.get("a", as_of=start / 1000)
        assert store.get("a", as_of=(t + 400) / 1000) == {"v": 4}
        assert store.get("b", as_of=(t + 400) / 1000) == {"v": 2}


def test_a_key_past_its_ttl_at_the_time_asked_reads_absent(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = make_topic()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR, ttl=5.0) as store:
        status = store.status().history
        assert status is not None and status.complete_from is not None
        t = int(status.complete_from * 1000) + 1_000
        _produce(kafka_bootstrap, topic, [("k", {"v": 1}, 0, t)])
        _caught_up(store, kafka_bootstrap, topic)
        assert store.get("k", as_of=(t + 4_999) / 1000) == {"v": 1}  # before its expiry
        assert store.get("k", as_of=(t + 5_001) / 1000) is None  # after it
        assert dict(store.items(as_of=(t + 2_000) / 1000)) == {"k": {"v": 1}}


@pytest.mark.parametrize("face", ["thread", "process", "shared", "switching"])
def test_a_view_stays_at_its_instant_on_every_face(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, face: str
) -> None:
    """A view (now, and as of a time) keeps answering what the store held when it was
    taken while the store follows on: in process, from a writer process (its own store and
    a SharedStore reading it, both RocksDB secondaries), and through a SwitchingStore."""
    topic = make_topic(partitions=2)
    follower = "thread" if face in ("thread", "switching") else "process"
    with contextlib.ExitStack() as stack:
        own = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR, follower=follower)
        stack.enter_context(own)
        store: Any = own
        if face == "shared":
            store = stack.enter_context(SharedStore(tmp_path / "s").start(timeout=60))
        elif face == "switching":
            store = stack.enter_context(SwitchingStore(own))
        status = own.status().history
        assert status is not None and status.complete_from is not None
        t = int(status.complete_from * 1000) + 1_000
        _produce(kafka_bootstrap, topic, [("a", {"v": 1}, 0, t), ("b", {"v": 1}, 1, t)])
        assert store.wait_for(end_offsets(kafka_bootstrap, topic), timeout=30)
        with store.view() as now, store.view(as_of=t / 1000) as then:
            _produce(kafka_bootstrap, topic, [("a", {"v": 2}, 0, t + 10), ("b", None, 1, t + 10)])
            assert store.wait_for(end_offsets(kafka_bootstrap, topic), timeout=30)
            assert dict(store.items()) == {"a": {"v": 2}}  # the store moved on
            for view in (now, then):
                assert dict(view.items()) == {"a": {"v": 1}, "b": {"v": 1}}
                assert view.get_many(["a", "b"]) == {"a": {"v": 1}, "b": {"v": 1}}
                assert view.count() == 2
            # As of a later time, a view answers what the store answered at its instant,
            # which had not read the records of that time yet.
            assert then.get("a", as_of=(t + 10) / 1000) == {"v": 1}
            assert now.get_many(["a", "b"], as_of=(t + 10) / 1000) == {"a": {"v": 1}, "b": {"v": 1}}
        with store.view(as_of=(t + 10) / 1000) as later:
            assert dict(later.items()) == {"a": {"v": 2}}


def test_a_snapshot_boot_answers_from_its_own_start_and_exactly_after(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path
) -> None:
    """A store booted from a peer's snapshot carries the peer's versions but starts its own
    horizon when it resumes (what was written meanwhile may be compacted); after that,
    every version it follows answers exactly."""
    topic = make_topic()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "peer", history=HOUR) as peer:
        began = peer.status().history
        assert began is not None and began.complete_from is not None
        t = int(began.complete_from * 1000) + 1_000
        _produce(kafka_bootstrap, topic, [("a", {"v": 1}, 0, t), ("a", {"v": 2}, 0, t + 10)])
        _caught_up(peer, kafka_bootstrap, topic)
        assert peer.get("a", as_of=t / 1000) == {"v": 1}
        peer.checkpoint(tmp_path / "checkpoint")
    with Peer() as server:
        server.serve(snapshot_bytes(tmp_path / "checkpoint"))
        starts = _Starts()
        booted = GlobalStore(
            topic, kafka_bootstrap, tmp_path / "s", history=HOUR, bootstrap_from=server.url(),
            listeners=[starts],
        )  # fmt: skip
        with booted.start(timeout=60):
            assert starts.to_read == [0]  # it resumed from the snapshot, read nothing more
            own = booted.status().history
            assert own is not None and own.complete_from is not None
            assert own.complete_from > began.complete_from  # its own start, not the peer's
            with pytest.raises(HistoryUnavailable):
                booted.get("a", as_of=began.complete_from)
            assert booted.get("a") == {"v": 2}
            u = int(own.complete_from * 1000) + 1_000
            _produce(kafka_bootstrap, topic, [("a", {"v": 3}, 0, u), ("a", None, 0, u + 10)])
            _caught_up(booted, kafka_bootstrap, topic)
            at = [(u + ms) / 1000 for ms in (-1, 0, 9, 10)]
            assert [booted.get("a", as_of=s) for s in at] == [{"v": 2}, {"v": 3}, {"v": 3}, None]


def test_versions_in_an_older_layout_are_rebuilt_from_the_topic_at_start(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR) as store:
        status = store.status().history
        assert status is not None and status.complete_from is not None
        t = int(status.complete_from * 1000) + 1_000
        _produce(kafka_bootstrap, topic, [("a", {"v": 1}, 0, t)])
        _caught_up(store, kafka_bootstrap, topic)
    storage = Storage(tmp_path / "s")  # as a store of the first history layout left it
    storage.put_meta(K_HISTORY_LAYOUT, None)
    storage.close()
    caplog.set_level(logging.WARNING, logger="globalstore")
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR) as store:
        assert "history layout 1" in caplog.text  # the rebuild, and why
        again = store.status().history
        assert again is not None and again.complete_from is not None
        assert store.get("a", as_of=max(t / 1000, again.complete_from)) == {"v": 1}
        assert store.get("a") == {"v": 1}
