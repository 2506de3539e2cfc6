"""Several instances (separate processes, separate directories) converge to the same content,
and many reader threads never see an error or a half-applied batch while the follower writes."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from globalstore import GlobalStore, StoreClosed, StoreListener
from globalstore.follow.topic import end_offsets
from tests.integration.store_support import produce

_INSTANCE = """
import json, sys
from globalstore import GlobalStore, StoreClosed, StoreListener
topic, bootstrap, path = sys.argv[1:4]
with GlobalStore(topic, bootstrap, path) as store:
    print("READY", flush=True)
    target = {int(p): o for p, o in json.loads(sys.stdin.readline()).items()}
    assert store.wait_for(target, timeout=60), store.status()
    print(json.dumps({"items": dict(store.items()), "count": store.count()}), flush=True)
"""


def test_two_processes_converge(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    rng = random.Random(7)
    model: dict[str, object] = {}

    def write(n: int) -> None:
        batch = []
        for _ in range(n):
            key = f"k{rng.randrange(300)}"
            value = None if rng.random() < 0.2 else {"v": rng.randrange(1000)}
            batch.append((key, value))
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        produce(kafka_bootstrap, topic, batch)

    write(2000)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _INSTANCE, topic, kafka_bootstrap, str(tmp_path / f"inst{i}")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
        )
        for i in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        write(2000)  # while both follow
        target = json.dumps(end_offsets(kafka_bootstrap, topic))
        results = []
        for proc in procs:
            out, _ = proc.communicate(target + "\n", timeout=90)
            assert proc.returncode == 0
            results.append(json.loads(out))
    finally:
        for proc in procs:
            proc.kill()
    assert results[0] == results[1]
    assert results[0]["items"] == model
    assert results[0]["count"] == len(model)


def test_readers_never_see_torn_batches(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    """Record n sets key k{n % K} to n, so a view holding the K consecutive numbers ending at
    e - 1 is the log up to offset e. A listener notes each applied batch's end (the store's
    position when on_changes runs) and holds the writer until readers have scanned it. Readers
    must then have seen exactly those batch ends: never a view inside a batch."""
    keys = 40
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{n % keys}", n) for n in range(keys)])
    errors: list[BaseException] = []
    seen_ends: set[int] = set()
    stop = threading.Event()
    batches = BatchEnds()
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[batches])
    batches.store = store

    with store:

        def reader() -> None:
            ticket = 0
            try:
                while not stop.is_set():
                    ticket = batches.scan_starts()
                    values = sorted(v for _, v in store.items())
                    assert values == list(range(values[0], values[0] + keys)), values
                    assert store.get(f"k{random.randrange(keys)}") is not None
                    seen_ends.add(values[-1] + 1)
                    batches.scanned(ticket)
            except BaseException as exc:
                errors.append(exc)
                batches.scanned(ticket)

        batches.ends.append(store.position()[0])
        readers = [threading.Thread(target=reader) for _ in range(6)]
        for t in readers:
            t.start()
        batches.hold = True
        total = keys
        for _ in range(10):
            produce(
                kafka_bootstrap, topic, [(f"k{n % keys}", n) for n in range(total, total + 500)]
            )
            total += 500
        assert store.wait_for({0: total}, timeout=60), f"store at {store.status()}"
        batches.wait_for_a_scan_begun_now()  # the last batch's end is scanned too
        stop.set()
        for t in readers:
            t.join(30)
        assert errors == []
        assert batches.ends[-1] == total
        gaps = [b - a for a, b in itertools.pairwise(batches.ends)]
        assert max(gaps) > 1, f"every batch held one record ({gaps}): nothing could be torn"
        assert seen_ends == set(batches.ends), (
            f"views at {sorted(seen_ends - set(batches.ends))} are inside a batch; "
            f"batch ends never seen: {sorted(set(batches.ends) - seen_ends)}"
        )
        assert sorted(v for _, v in store.items()) == list(range(total - keys, total))
        assert store.count() == keys


class BatchEnds(StoreListener):
    """The store's position after each applied batch; with `hold`, the store thread waits
    after each batch until a scan that began after it was written has finished. Each scan
    takes a ticket (the number of holds so far) before it starts: one whose ticket is the
    current hold's began after the write."""

    def __init__(self) -> None:
        self.store: GlobalStore | None = None
        self.ends: list[int] = []
        self.hold = False
        self._holds = 0
        self._newest_scanned = -1  # the highest ticket of a finished scan
        self._cond = threading.Condition()

    def scan_starts(self) -> int:
        with self._cond:
            return self._holds

    def scanned(self, ticket: int) -> None:
        with self._cond:
            self._newest_scanned = max(self._newest_scanned, ticket)
            self._cond.notify_all()

    def wait_for_a_scan_begun_now(self) -> None:
        with self._cond:
            self._holds += 1
            goal = self._holds
            assert self._cond.wait_for(lambda: self._newest_scanned >= goal, timeout=60), (
                f"no scan begun after hold {goal} finished (newest {self._newest_scanned})"
            )

    def on_changes(self, topic, upserted, deleted):  # type: ignore[no-untyped-def]
        if self.hold:
            assert self.store is not None
            self.ends.append(self.store.position()[0])
            self.wait_for_a_scan_begun_now()


def test_restore_of_120k_records(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    """A restore large enough to take the bulk path (counted after ready), checked record by
    record. Its speed is measured by benchmarks/, not here."""
    topic = make_topic(partitions=6)
    n = 120_000
    body = "x" * 150
    produce(kafka_bootstrap, topic, ((f"key-{i:06d}", {"i": i, "pad": body}) for i in range(n)))
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.count() == n
        assert sum(store.position().values()) == n
        assert store.position() == end_offsets(kafka_bootstrap, topic)
        wrong = [k for k, v in store.items() if v != {"i": int(k[4:]), "pad": body}]
        assert wrong == []
        assert list(store.keys()) == [f"key-{i:06d}" for i in range(n)]
        assert sum(1 for _ in store.keys(prefix="key-0001")) == 100


def test_queries_racing_close_say_closed(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(2000)])
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s").start()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        while True:
            try:
                store.get("k7")
                for _ in store.items(limit=200):
                    pass
                reads[0] += 1
            except BaseException as exc:
                errors.append(exc)
                return

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 60
    while reads[0] < 8 and not errors:  # let the readers get going before closing
        assert time.monotonic() < deadline, f"{reads[0]} reads in 60 s"
        time.sleep(0.01)
    assert errors == [], "a read failed before close()"
    store.close()
    for t in readers:
        t.join(10)
    assert reads[0] > 0
    assert len(errors) == 4
    assert all(isinstance(e, StoreClosed) for e in errors), errors
