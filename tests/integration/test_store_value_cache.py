"""The value cache on a real broker: reader threads hammer a key set while the follower
applies rewrites of it, and every get is checked against the offset order; after
wait_for(position) a get answers the value the position covers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from globalstore import GlobalStore, ValueCache
from tests.conftest import TopicFactory
from tests.integration.store_support import produce

KEYS = [f"hot-{i:02d}" for i in range(20)]


@pytest.mark.parametrize("follower", ["thread", "process"])
def test_gets_follow_the_offset_order_while_the_keys_are_rewritten(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, follower: str
) -> None:
    """Round v writes {"v": v} to every key, at offsets v*n .. v*n+n-1 of the one partition:
    a get that begins once position p is visible answers a round no older than the last one
    p covers, and no reader sees a key go back."""
    topic = make_topic(partitions=1)
    n = len(KEYS)
    produce(kafka_bootstrap, topic, [(k, {"v": 0}) for k in KEYS])
    store = GlobalStore(
        topic,
        kafka_bootstrap,
        tmp_path / "s",
        value_cache=ValueCache(entries=100),
        follower=follower,  # type: ignore[arg-type]
    )
    failures: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        last = dict.fromkeys(KEYS, 0)
        while not stop.is_set():
            for k in KEYS:
                floor = store.position().get(0, 0) // n - 1
                value = store.get(k)
                got = -1 if value is None else value["v"]
                if got < floor or got < last[k]:
                    failures.append(f"{k}: round {got}, position covers {floor}, was {last[k]}")
                    stop.set()
                last[k] = got

    with store:
        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for v in range(1, 41):
                ends = produce(kafka_bootstrap, topic, [(k, {"v": v}) for k in KEYS])
                assert store.wait_for(ends, timeout=60), f"store at {store.status()}"
                # What wait_for() promises: every get now answers this round.
                answers = {k: store.get(k) for k in KEYS}
                assert answers == {k: {"v": v} for k in KEYS}, (v, answers)
                assert not failures, failures[:5]
        finally:
            stop.set()
            for t in threads:
                t.join(30)
    assert not failures, failures[:5]
