"""Value formats on a real topic: answers in the current format before, during and after the
eager conversion (a reader thread checks all along), a converter that fails, kill -9 during
the conversion, and a downgrade that rebuilds (or refuses) instead of misreading."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from globalstore import ConversionFailed, GlobalStore, StoreConfig, UnreadableStore
from globalstore.codec import LAYOUT_VERSION
from globalstore.shaping import migrate
from globalstore.storage import Storage
from globalstore.storage.meta import Meta
from tests.integration.store_support import produce
from tests.unit.shaping.test_migrate import make_v0_store
from tests.value_formats import BAD_ID, CONVERTERS, v3

N = 3_000
REPO = Path(__file__).resolve().parents[2]


def _two_format_topic(bootstrap: str, make_topic) -> str:  # type: ignore[no-untyped-def]
    """N keys in format 1, then every third one rewritten in format 2."""
    topic = make_topic(partitions=2)
    produce(bootstrap, topic, [(f"k{i:05d}", {"i": i}) for i in range(N)])
    rewrites = [(f"k{i:05d}", {"id": i, "v": 2}) for i in range(0, N, 3)]
    produce(bootstrap, topic, rewrites, value_format=2)
    return topic


def _wait_converted(store: GlobalStore, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while store.status().migration is not None:
        assert time.monotonic() < deadline, f"conversion still running: {store.status()}"
        time.sleep(0.02)


class Reader(threading.Thread):
    """Reads random keys until stopped; records any answer not in format 3."""

    def __init__(self, store: GlobalStore) -> None:
        super().__init__(daemon=True)
        self.store, self.stop_event, self.reads = store, threading.Event(), 0
        self.first_read = threading.Event()
        self.wrong: list[str] = []

    def run(self) -> None:
        rng = random.Random(9)
        while not self.stop_event.is_set():
            i = rng.randrange(N)
            try:
                value = self.store.get(f"k{i:05d}")
                if value != v3(i):
                    self.wrong.append(f"k{i:05d}: {value}")
            except ConversionFailed:
                if i != BAD_ID:
                    self.wrong.append(f"k{i:05d}: conversion failed")
            self.reads += 1
            self.first_read.set()


def test_every_answer_is_in_the_current_format_before_during_and_after(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = _two_format_topic(kafka_bootstrap, make_topic)
    store = GlobalStore(
        topic, kafka_bootstrap, tmp_path / "s", value_format=3, converters=CONVERTERS
    )
    with store.start(timeout=60):
        reader = Reader(store)
        reader.start()  # while the eager pass runs
        assert reader.first_read.wait(60), "the reader never read"
        _wait_converted(store)
        reader.stop_event.set()
        reader.join()
        assert reader.reads > 0 and not reader.wrong, reader.wrong[:5]
        status = store.status()
        assert status.conversion_failures == 1 and status.migrated_values == N - 1, status
        with pytest.raises(ConversionFailed) as failed:
            store.get(f"k{BAD_ID:05d}")
        assert failed.value.version == 1 and failed.value.offset >= 0
        # A record still written in format 1 after the pass is converted when read.
        before = store.position()[0]
        produce(kafka_bootstrap, topic, [("late", {"i": 7})], partition=0)
        assert store.wait_for({0: before + 1}, timeout=10)
        assert store["late"] == v3(7)
        assert len(list(store.keys())) == N + 1  # the failing record is kept, not lost
    # Once converted, a restart has nothing left to convert.
    path = tmp_path / "s"
    with GlobalStore(topic, kafka_bootstrap, path, value_format=3, converters=CONVERTERS) as again:
        assert again.status().migration is None and again.status().migrated_values == 0
        assert again["k00004"] == v3(4)


def test_kill_9_during_the_conversion_resumes_without_converting_twice(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = _two_format_topic(kafka_bootstrap, make_topic)
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.crash_converter",
            kafka_bootstrap,
            topic,
            str(tmp_path / "s"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = ""
        deadline = time.monotonic() + 120  # the child prints its progress every 20 ms
        for line in child.stdout:
            migrated = int(line.split()[1])
            if 0 < migrated < N // 2 and "None" not in line:
                break
            assert time.monotonic() < deadline, f"no conversion under way after 120 s: {line!r}"
        else:
            pytest.fail(f"the child ended before converting anything (last line {line!r})")
    finally:
        child.kill()
        child.wait()
    with GlobalStore(
        topic, kafka_bootstrap, tmp_path / "s", value_format=3, converters=CONVERTERS
    ) as store:
        _wait_converted(store)
        # Resumed from the cursor, not from the start (k00013 fails again only if it lay
        # after the cursor); a value converted twice would fail in the converter from 1.
        status = store.status()
        assert status.conversion_failures <= 1 and 0 < status.migrated_values < N - 1, status
        good = [k for k in store.keys(prefix="k") if k != f"k{BAD_ID:05d}"]
        assert store.get_many(good) == {f"k{i:05d}": v3(i) for i in range(N) if i != BAD_ID}
        assert store.count() == N


def _meta(path: Path) -> Meta:
    s = Storage(path, read_only=True)
    try:
        return s.read_meta()
    finally:
        s.close()


def _half_migrated_v0_store(path: Path, topic: str, n: int) -> None:
    make_v0_store(path, n, topic)
    s = Storage(path)
    s.load(s.read_meta())
    migration = migrate.Migration(s, StoreConfig(topic, "", path).value_formats(), topic)
    migration.begin()
    migration.step(migrate.Limits(keys=n // 2))  # half the values are in layout 1 now
    s.close()


def test_a_version_that_cannot_read_the_new_layout_rebuilds_instead_of_misreading(
    kafka_bootstrap: str, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = make_topic(partitions=1)
    n = 400
    produce(kafka_bootstrap, topic, [(f"k{i:04d}", {"i": i}) for i in range(n)])
    _half_migrated_v0_store(tmp_path / "s", topic, n)
    # The layout-0 release: it knows layout 0 only.
    monkeypatch.setattr(migrate, "KNOWN_LAYOUTS", frozenset({0}))

    refusing = StoreConfig(topic, kafka_bootstrap, tmp_path / "s", unreadable_store="refuse")
    with pytest.raises(UnreadableStore, match="unknown store layout version 1"):
        GlobalStore.from_config(refusing).start(timeout=30)
    assert _meta(tmp_path / "s").migrate_from == 0  # left as it was

    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        reason = store.status().rebuild_reason
        assert reason is not None and "unknown store layout version 1" in reason
        assert dict(store.items()) == {f"k{i:04d}": {"i": i} for i in range(n)}
    meta = _meta(tmp_path / "s")
    assert meta.layout == LAYOUT_VERSION and meta.migrate_from is None
