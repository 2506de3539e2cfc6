"""Following: records produced after start become visible; progress and status are reported."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from globalstore import GlobalStore
from globalstore.codec import encode_value, format_headers
from globalstore.follow.topic import end_offsets
from tests.integration.store_support import produce


def test_follow_applies_updates_and_deletes(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [("a", {"v": 1}), ("b", {"v": 1})])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.count() == 2
        produce(kafka_bootstrap, topic, [("a", {"v": 2}), ("b", None), ("c", {"v": 3})])
        # Every partition's end, taken from the broker after the produce was acknowledged:
        # a store that skips a partition or stops early cannot reach it.
        ends = end_offsets(kafka_bootstrap, topic)
        assert sum(ends.values()) == 5
        assert store.wait_for(ends, timeout=60), f"ends {ends}, store at {store.status()}"
        assert store.position() == ends
        assert store.get("a") == {"v": 2}
        assert store.get("b") is None
        assert store.get("c") == {"v": 3}
        assert dict(store.items()) == {"a": {"v": 2}, "c": {"v": 3}}
        assert store.count() == 2
        assert not store.wait_for({0: 10_000}, timeout=0.2)

        st = store.status()
        assert st.state == "running" and st.ready and st.key_count == 2
        assert st.layout_version == 1 and st.last_restore_at is not None
        assert st.position == ends
        assert store.lag() == dict.fromkeys(ends, 0)
        assert st.last_error is None


def test_wait_for_blocks_until_applied(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        # An empty topic: once the store has met the partition's end, its position is 0.
        deadline = time.monotonic() + 60
        while store.position() != {0: 0}:
            assert time.monotonic() < deadline, f"store at {store.status()}"
            time.sleep(0.01)
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(store.wait_for({0: 3}, 120)))
        waiter.start()
        produce(kafka_bootstrap, topic, [("x", 1), ("y", 2)])
        # Two of the three records are applied: wait_for({0: 3}) must still be blocked.
        assert store.wait_for({0: 2}, timeout=60), f"store at {store.status()}"
        assert not store.wait_for({0: 3}, timeout=0.2)
        assert not result, f"wait_for({{0: 3}}) returned {result} at {store.position()}"
        produce(kafka_bootstrap, topic, [("z", 3)])
        waiter.join(60)
        assert not waiter.is_alive(), f"wait_for still blocked at {store.status()}"
        assert result == [True]
        assert store.position() == {0: 3}
        assert store.get("z") == 3


def test_each_record_produced_while_following_becomes_visible(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    # How fast is the benchmark's to say (benchmarks/bench_store.py, produce→visible): a
    # wall-clock bound here would measure the machine's load, not the store.
    topic = make_topic(partitions=1)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        for i in range(30):
            p.produce(
                topic, key=f"k{i}".encode(), value=encode_value({"i": i}), headers=format_headers()
            )
            assert p.flush(30) == 0, f"k{i} left unacknowledged"
            deadline = time.monotonic() + 60
            while store.get(f"k{i}") is None:
                assert time.monotonic() < deadline, f"k{i} not visible; store at {store.status()}"
                time.sleep(0.0005)
        assert store.position() == {0: 30}
