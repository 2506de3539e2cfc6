"""Several instances (separate processes, separate directories) converge to the same content,
and many reader threads never see an error or a half-applied batch while the follower writes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from globalstore import GlobalStore, StoreClosed
from globalstore.topic import end_offsets
from tests.integration.store_support import produce

_INSTANCE = """
import json, sys
from globalstore import GlobalStore, StoreClosed
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
    """Record n sets key k{n % K} to n. Any point-in-time view of a prefix of the log then
    holds exactly the K consecutive numbers ending at its last record: a torn view would not."""
    keys = 40
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{n % keys}", n) for n in range(keys)])
    errors: list[BaseException] = []
    scans = [0]
    stop = threading.Event()

    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:

        def reader() -> None:
            try:
                while not stop.is_set():
                    values = sorted(v for _, v in store.items())
                    assert values == list(range(values[0], values[0] + keys)), values
                    assert store.get(f"k{random.randrange(keys)}") is not None
                    scans[0] += 1
            except BaseException as exc:
                errors.append(exc)

        readers = [threading.Thread(target=reader) for _ in range(6)]
        for t in readers:
            t.start()
        total = keys
        for _ in range(10):
            produce(
                kafka_bootstrap, topic, [(f"k{n % keys}", n) for n in range(total, total + 500)]
            )
            total += 500
        assert store.wait_for({0: total}, timeout=30)
        time.sleep(0.2)
        stop.set()
        for t in readers:
            t.join(10)
        assert errors == []
        assert scans[0] > 10
        assert sorted(v for _, v in store.items()) == list(range(total - keys, total))
        assert store.count() == keys


def test_restore_of_100k_records(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=6)
    n = 120_000
    body = "x" * 150
    produce(kafka_bootstrap, topic, ((f"key-{i:06d}", {"i": i, "pad": body}) for i in range(n)))
    began = time.monotonic()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        seconds = time.monotonic() - began
        assert store.count() == n
        assert sum(store.position().values()) == n
        assert store.get("key-000000") == {"i": 0, "pad": body}
        assert store.get(f"key-{n - 1:06d}") == {"i": n - 1, "pad": body}
        assert sum(1 for _ in store.keys(prefix="key-0001")) == 100
        print(f"restored {n} records in {seconds:.2f}s ({n / seconds:.0f} records/s)")


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
    time.sleep(0.3)
    store.close()
    for t in readers:
        t.join(10)
    assert reads[0] > 0
    assert len(errors) == 4
    assert all(isinstance(e, StoreClosed) for e in errors), errors
