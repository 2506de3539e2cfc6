"""A store left in layout 0 by an older version opens, serves, and migrates in the background."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from globalstore import GlobalStore
from globalstore.codec import LAYOUT_VERSION
from globalstore.storage import Storage
from globalstore.storage.meta import K_LAYOUT, K_TOPIC, offset_key
from tests.integration.store_support import produce


def test_layout_0_store_is_served_and_migrated(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    n = 2_500
    produce(kafka_bootstrap, topic, [(f"k{i:05d}", {"i": i}) for i in range(n)])
    old = Storage(tmp_path / "s")
    old.write_values(
        [(f"k{i:05d}".encode(), orjson.dumps({"i": i})) for i in range(n)],
        {K_LAYOUT: b"0", K_TOPIC: topic.encode(), offset_key(0): n.to_bytes(8, "big")},
    )
    old.close()

    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.get("k00042") == {"i": 42}  # old layout, read lazily
        assert store.count() == n
        produce(kafka_bootstrap, topic, [("k00007", {"i": "new"})])
        assert store.wait_for({0: n + 1}, timeout=10)
        deadline = time.monotonic() + 20
        while store.status().migration is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.status().migration is None, store.status()
        assert store.status().layout_version == LAYOUT_VERSION
        entry = store.get_entry("k00007")
        assert entry is not None and entry.value == {"i": "new"} and entry.offset == n
        assert dict(store.items()) == {f"k{i:05d}": {"i": "new" if i == 7 else i} for i in range(n)}
    reopened = Storage(tmp_path / "s")
    try:
        assert reopened.read_meta().layout == LAYOUT_VERSION
        assert reopened.read_meta().migrate_from is None
    finally:
        reopened.close()
