"""Following: records produced after start become visible; progress and status are reported."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from globalstore import GlobalStore
from globalstore.codec import encode_value, format_headers
from tests.integration.store_support import produce


def _end_offsets(store: GlobalStore) -> dict[int, int]:
    return {p: store.position().get(p, 0) + lag for p, lag in store.lag().items()}


def test_follow_applies_updates_and_deletes(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [("a", {"v": 1}), ("b", {"v": 1})])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.count() == 2
        produce(kafka_bootstrap, topic, [("a", {"v": 2}), ("b", None), ("c", {"v": 3})])
        deadline = time.monotonic() + 10
        while store.get("c") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.get("a") == {"v": 2}
        assert store.get("b") is None
        assert store.get("c") == {"v": 3}
        assert store.count() == 2
        assert sum(store.position().values()) == 5
        assert store.wait_for(store.position(), timeout=1)
        assert not store.wait_for({0: 10_000}, timeout=0.2)

        st = store.status()
        assert st.state == "running" and st.ready and st.key_count == 2
        assert st.layout_version == 1 and st.last_restore_at is not None
        assert st.position == store.position()
        assert all(v == 0 for v in store.lag().values())
        assert st.last_error is None


def test_wait_for_blocks_until_applied(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.position() == {} or store.position() == {0: 0}
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(store.wait_for({0: 3}, 10)))
        waiter.start()
        time.sleep(0.1)
        assert not result, "wait_for returned before anything was produced"
        produce(kafka_bootstrap, topic, [("x", 1), ("y", 2), ("z", 3)])
        waiter.join(10)
        assert result == [True]
        assert store.get("z") == 3


def test_produce_to_visible_latency_is_low(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        latencies = []
        for i in range(30):
            t0 = time.perf_counter()
            p.produce(
                topic, key=f"k{i}".encode(), value=encode_value({"i": i}), headers=format_headers()
            )
            p.flush(5)
            while store.get(f"k{i}") is None:
                time.sleep(0.0005)
            latencies.append(time.perf_counter() - t0)
        latencies.sort()
        # Generous bound for a loaded CI box; the benchmark measures the real p99.
        assert latencies[len(latencies) // 2] < 0.1, latencies
