"""Secondary indexes against a real broker and real RocksDB: random puts, overwrites,
tombstones and index-value changes produced to a topic, and after each batch is applied
find() and find_count() equal a Python model, on both restore loops and while following;
an index added to a store that already holds keys, its build killed with kill -9 halfway
and resumed, equals the model too."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from globalstore import GlobalStore, ReadOnlyStore
from globalstore.read.protocols import StoreReader
from globalstore.storage import Storage
from tests.integration.crash_indexer import by_courier
from tests.integration.store_support import Record, produce

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("crash_indexer.py")
COURIERS = [f"c-{i}" for i in range(12)]
TAGS = ["cold", "fragile", "heavy", "late", "paid"]


def by_tag(key: str, value: Any) -> Iterable[str]:
    """Every tag of an order: a key is under several index values, or none."""
    tags: list[str] = value["tags"]
    return tags


def shaped(key: str, value: Any) -> Any:
    """The transform the indexes see the output of: drops cancelled orders, upper-cases the
    courier (so an index built on the raw record would disagree)."""
    if value.get("cancelled"):
        return None
    courier = value.get("courier")
    return {**value, "courier": None if courier is None else courier.upper()}


INDEXES = {"by_courier": by_courier, "by_tag": by_tag}


class Model:
    """What the store must hold: the values after the transform, per key."""

    def __init__(self, transform: Any = None) -> None:
        self.values: dict[str, Any] = {}
        self.transform = transform

    def apply(self, records: Iterable[Record]) -> None:
        for key, value in records:
            out = value if value is None or self.transform is None else self.transform(key, value)
            if out is None:
                self.values.pop(key, None)
            else:
                self.values[key] = out

    def find(self, name: str, index_value: str) -> list[tuple[str, Any]]:
        fn = INDEXES[name]
        found = []
        for key, value in sorted(self.values.items()):
            out = fn(key, value)
            names = set() if out is None else {out} if isinstance(out, str) else set(out)
            if index_value in names:
                found.append((key, value))
        return found

    def index_values(self, name: str) -> set[str]:
        fn = INDEXES[name]
        out: set[str] = set()
        for key, value in self.values.items():
            got = fn(key, value)
            out |= set() if got is None else {got} if isinstance(got, str) else set(got)
        return out


def orders(rng: random.Random, n: int, keys: int, start: int = 0) -> list[Record]:
    """Puts, overwrites (moving keys between couriers and tags), cancellations and
    tombstones of `keys` orders."""
    out: list[Record] = []
    for i in range(start, start + n):
        key = f"o{rng.randrange(keys):04d}"
        roll = rng.random()
        if roll < 0.1:
            out.append((key, None))
            continue
        order: dict[str, Any] = {"n": i, "tags": rng.sample(TAGS, rng.randrange(3))}
        if roll > 0.15:  # a few orders have no courier: not in by_courier
            order["courier"] = rng.choice(COURIERS)
        if rng.random() < 0.1:
            order["cancelled"] = True
        out.append((key, order))
    return out


def assert_indexes_equal(store: StoreReader, model: Model) -> None:
    """find() of every index value (and of absent ones) and find_count() equal the model."""
    for name in INDEXES:
        wanted = model.index_values(name) | {"nobody", ""}
        for index_value in sorted(wanted):
            expected = model.find(name, index_value)
            assert list(store.find(name, index_value)) == expected, (name, index_value)
            assert store.find_count(name, index_value) == len(expected), (name, index_value)
        # The whole index in one range: index value order, then key order.
        ordered = [key for v in sorted(model.index_values(name)) for key, _ in model.find(name, v)]
        assert [key for key, _ in store.find(name)] == ordered, name


def test_find_equals_the_model_after_each_batch_on_both_loops(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("INDEX_SEED", "2517")))
    topic = make_topic(partitions=3)
    model = Model(shaped)
    preload = orders(rng, 3_000, 400)
    produce(kafka_bootstrap, topic, preload)
    model.apply(preload)
    # A bulk restore (the C loop where it is built), then following.
    with GlobalStore(
        topic,
        kafka_bootstrap,
        tmp_path / "bulk",
        transform=shaped,
        indexes=INDEXES,
        bulk_restore_threshold=100,
    ) as store:
        assert_indexes_equal(store, model)
        assert all(index.ready for index in store.status().indexes.values())
        for round_ in range(6):
            records = orders(rng, rng.randrange(20, 200), 400, start=10_000 * (round_ + 1))
            written = produce(kafka_bootstrap, topic, records)
            model.apply(records)
            assert store.wait_for(written, 60)
            assert_indexes_equal(store, model)
        entries = {name: index.entries for name, index in store.status().indexes.items()}
        total = sum(len(model.find(n, v)) for n in INDEXES for v in model.index_values(n))
        assert sum(entries.values()) == total
    # The Python loop (an exact restore, record by record) writes the same index.
    with GlobalStore(
        topic,
        kafka_bootstrap,
        tmp_path / "python",
        transform=shaped,
        indexes=INDEXES,
        native_restore=False,
    ) as store:
        assert_indexes_equal(store, model)
    with ReadOnlyStore(tmp_path / "bulk") as files:  # what the first store left on disk
        assert_indexes_equal(files, model)


class Child:
    """crash_indexer.py in its own process."""

    def __init__(self, bootstrap: str, topic: str, path: Path, stderr: Path, chunk: int) -> None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
        )
        self.stderr = stderr
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), bootstrap, topic, str(path), str(chunk)],
            stdout=subprocess.PIPE,
            stderr=stderr.open("wb"),
            text=True,
            env=env,
        )
        self.following = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("following"):
                self.following.set()

    def kill(self) -> None:
        assert self.proc.poll() is None, f"child died: {self.stderr.read_text()[-2000:]}"
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL


def _indexed(path: Path) -> tuple[bool, int]:
    """(built, keys indexed so far) of by_courier, from the store's files."""
    with ReadOnlyStore(path) as files:
        index = files.status().indexes.get("by_courier")
    if index is None:
        return False, 0
    return index.ready, 0 if index.indexed_keys is None else index.indexed_keys


def test_an_added_index_is_built_and_a_build_killed_halfway_resumes(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("INDEX_SEED", "77")))
    topic = make_topic(partitions=2)
    model = Model()
    records = orders(rng, 4_000, 2_000)
    produce(kafka_bootstrap, topic, records)
    model.apply(records)
    path = tmp_path / "s"
    with GlobalStore(topic, kafka_bootstrap, path) as store:  # no index yet
        keys = store.count()
    assert keys == len(model.values) > 1_000
    # The child adds the index: ~2 ms a key, 50 keys a chunk: the build lasts seconds.
    child = Child(kafka_bootstrap, topic, path, tmp_path / "child.err", chunk=50)
    try:
        assert child.following.wait(120), child.stderr.read_text()[-2000:]
        more = orders(rng, 300, 2_000, start=50_000)  # written while it builds
        produce(kafka_bootstrap, topic, more)
        model.apply(more)
        deadline = time.monotonic() + 120
        while True:
            built, indexed = _indexed(path)
            assert not built, "the build ended before the test could kill it"
            if indexed >= keys // 3:
                break
            assert time.monotonic() < deadline, f"the build is stuck at {indexed} keys"
            time.sleep(0.05)
    finally:
        child.kill()
    built, killed_at = _indexed(path)
    assert not built and killed_at >= keys // 3
    # Restarted with the same index (the quick function: the same entries), it resumes from
    # the cursor it wrote, and the built index equals the model.
    with GlobalStore(topic, kafka_bootstrap, path, indexes={"by_courier": by_courier}) as store:
        deadline = time.monotonic() + 60
        while not store.status().indexes["by_courier"].ready:
            assert time.monotonic() < deadline, store.status().indexes
            time.sleep(0.05)
        for courier in [*COURIERS, "nobody"]:
            expected = model.find("by_courier", courier)
            assert list(store.find("by_courier", courier)) == expected, courier
            assert store.find_count("by_courier", courier) == len(expected)
        assert store.status().indexes["by_courier"].entries == sum(
            len(model.find("by_courier", c)) for c in COURIERS
        )
    # Resumed, not started over: both runs together visited each key about once (starting
    # over would have visited the first `killed_at` keys twice).
    files = Storage(path, read_only=True)
    try:
        scanned = files.read_meta().indexes["by_courier"].scanned
    finally:
        files.close()
    assert killed_at < scanned <= len(model.values) + 100


def _index_entries(path: Path) -> list[bytes]:
    """Every entry of the index column family a store left on disk, in order."""
    storage = Storage(path)
    try:
        storage.load(storage.read_meta())
        assert storage._index is not None
        return storage._index.keys(b"", b"\xff" * 9, 10**9)
    finally:
        storage.close()


def test_declared_indexes_write_the_bytes_of_their_functions_on_both_loops(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("INDEX_SEED", "2517")))
    topic = make_topic(partitions=3)
    produce(kafka_bootstrap, topic, orders(rng, 3_000, 400))
    declared = {"by_courier": "courier", "by_tag": "tags"}
    # Bulk restores into empty stores look up only keys written in an earlier batch (small
    # batches: 3,000 records over 400 keys repeat across them); the slow way, an exact
    # restore, looks every key up.
    bulk = {"bulk_restore_threshold": 100, "restore_batch_size": 200}
    stores: dict[str, dict[str, Any]] = {
        "slow way": {"indexes": INDEXES, "bulk_restore_threshold": 10**9},
        "functions": {"indexes": INDEXES, **bulk},
        "declared": {"indexes": declared, **bulk},  # the C loop
        "declared, Python loop": {"indexes": declared, "native_restore": False, **bulk},
    }
    with contextlib.ExitStack() as open_stores:
        # Restored, then following the same records.
        running = [
            open_stores.enter_context(GlobalStore(topic, kafka_bootstrap, tmp_path / n, **s))
            for n, s in stores.items()
        ]
        for round_ in range(3):
            records = orders(rng, 100, 400, start=10_000 * (round_ + 1))
            written = produce(kafka_bootstrap, topic, records)
            assert all(store.wait_for(written, 60) for store in running)
    entries = {name: _index_entries(tmp_path / name) for name in stores}
    assert len(entries["slow way"]) > 500
    assert entries["functions"] == entries["slow way"]
    assert entries["declared"] == entries["slow way"]
    assert entries["declared, Python loop"] == entries["slow way"]
