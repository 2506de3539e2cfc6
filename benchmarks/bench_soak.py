"""Soak: an hour of following at 15k records/s while 3 threads read; RSS and what fills it.

    python benchmarks/bench_soak.py [--minutes 60] [--rate 15000] [--keys 100000]

A writer process overwrites random keys of a 100k-key topic at --rate records/s, with a new
value each time (a sequence number), and deletes about 2 % of the keys it picks; some keys
are new. In this process a GlobalStore follows the topic while 3 threads call `get` on
random keys as fast as they can. Every 10 s a sample records the process's RSS beside what
can fill it: RocksDB's block cache, its memtables and table readers, the Python heap's
allocated blocks, what glibc's malloc has in use and what it holds free, the store's lag.

At the end the writer stops, the store catches up with the topic's end, and its items are
compared with an independent read of the topic (a plain consumer from the beginning, the
last value of every key, tombstones removing it). The script prints the samples at a few
points, the RSS slope over the last half, and whether the store was exact. It is a script,
not a test.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from bench_store import create_topic, fill_topic, key_of, log
from confluent_kafka import Consumer, Producer, TopicPartition

from globalstore import GlobalStore
from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.localkafka import LocalKafka, free_port

SAMPLE_EVERY_S = 10.0
DELETE_SHARE = 0.02
NEW_KEY_SHARE = 0.05  # keys picked from a range 5 % larger than the filled one
READERS = 3


def writer(bootstrap: str, topic: str, keys: int, rate: int, stop: str) -> None:
    """Runs in a child process until `stop` exists: overwrites, new keys and tombstones."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    headers, rng = format_headers(), random.Random(5)
    span = int(keys * (1 + NEW_KEY_SHARE))
    began, sent = time.perf_counter(), 0
    while not os.path.exists(stop):
        for _ in range(100):
            key = encode_key(key_of(rng.randrange(span)))
            if rng.random() < DELETE_SHARE:
                producer.produce(topic, key=key, value=None, headers=headers)
            else:
                value = encode_value({"seq": sent, "note": "x" * 160})
                producer.produce(topic, key=key, value=value, headers=headers)
            sent += 1
        producer.poll(0)
        ahead = sent / rate - (time.perf_counter() - began)
        if ahead > 0:
            time.sleep(ahead)
    if producer.flush(60) != 0:
        raise RuntimeError("the writer's records were left unacknowledged")


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class MallInfo2(ctypes.Structure):
    """glibc's mallinfo2(): what malloc holds from the system and how much of it is in use."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_mb() -> tuple[float, float]:
    """(in use, held but free) by glibc's malloc, in MB: RocksDB's caches and memtables and
    librdkafka's queues are in the first; the second is what freed memory kept resident."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / (1 << 20), info.fordblks / (1 << 20)


def sample(store: GlobalStore, began: float, reads: list[int]) -> dict[str, float]:
    """One row: RSS and its likely fillers, in MB; lag in records."""
    # The benchmark reaches into the live storage for RocksDB's memory properties.
    db = store.source.copy().storage._db
    prop = db.property_int_value
    mb = 1 << 20
    in_use, held_free = malloc_mb()
    return {
        "minute": (time.perf_counter() - began) / 60,
        "rss": rss_mb(),
        "block_cache": prop("rocksdb.block-cache-usage") / mb,
        "memtables": prop("rocksdb.cur-size-all-mem-tables") / mb,
        "table_readers": prop("rocksdb.estimate-table-readers-mem") / mb,
        "python_blocks": sys.getallocatedblocks() * 64 / mb,  # ~64 B a block: an estimate
        "malloc_in_use": in_use,
        "malloc_free_held": held_free,
        "lag": sum(store.lag().values()),
        "reads": sum(reads),
    }


def independent_read(bootstrap: str, topic: str) -> tuple[dict[str, Any], dict[int, int]]:
    """The last value of every key up to the topic's end, read with a plain consumer, and
    that end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "soak-check", "enable.auto.commit": False}
    )
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in meta.partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    left, out = {p for p, end in ends.items() if end > 0}, {}
    while left:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                raise RuntimeError(str(msg.error()))
            key = msg.key().decode()
            if msg.value() is None:
                out.pop(key, None)
            else:
                out[key] = orjson.loads(msg.value())
            if msg.offset() + 1 >= ends[msg.partition()]:
                left.discard(msg.partition())
    consumer.close()
    return out, ends


def soak(bootstrap: str, topic: str, workdir: Path, args: argparse.Namespace) -> None:
    stop_file = workdir / "stop"
    command = [sys.executable, __file__, "--writer", bootstrap, topic]
    child = subprocess.Popen([*command, str(args.keys), str(args.rate), str(stop_file)])
    store = GlobalStore(topic, bootstrap, workdir / "store").start(timeout=300)
    stop, reads = threading.Event(), [0] * READERS

    def read(slot: int) -> None:
        rng, get = random.Random(slot), store.get
        while not stop.is_set():
            for _ in range(100):
                get(key_of(rng.randrange(args.keys)))
            reads[slot] += 100

    threads = [threading.Thread(target=read, args=(i,)) for i in range(READERS)]
    for thread in threads:
        thread.start()
    began, samples = time.perf_counter(), []
    samples_file = Path(args.samples) if args.samples else None
    while time.perf_counter() - began < args.minutes * 60:
        time.sleep(SAMPLE_EVERY_S)
        row = sample(store, began, reads)
        samples.append(row)
        if samples_file is not None:
            with samples_file.open("a") as f:
                f.write(json.dumps(row) + "\n")
        if len(samples) % 6 == 0:
            log("  ".join(f"{k} {v:,.1f}" for k, v in row.items()))
    stop.set()
    for thread in threads:
        thread.join()
    stop_file.touch()
    child.wait(120)
    produced_at = time.perf_counter()
    log("writer stopped; reading the topic independently")
    expected, ends = independent_read(bootstrap, topic)
    if not store.wait_for(ends, timeout=300):
        raise RuntimeError(f"the store did not reach {ends}: at {store.position()}")
    actual = dict(store.items())
    log(f"caught up {time.perf_counter() - produced_at:.1f} s after the writer stopped")
    store.close()
    report(samples, expected, actual, args)


def report(
    samples: list[dict[str, float]],
    expected: dict[str, Any],
    actual: dict[str, Any],
    args: argparse.Namespace,
) -> None:
    half = [s for s in samples if s["minute"] >= args.minutes / 2]
    slope = _slope([s["minute"] for s in half], [s["rss"] for s in half])
    rss = [s["rss"] for s in half]
    print(
        f"\n{args.minutes:.0f} min at {args.rate:,} records/s, {READERS} readers, "
        f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}\n"
    )
    columns = "minute | RSS MB | block cache | memtables | table readers | Python heap"
    print(f"| {columns} | malloc in use | malloc free, held | lag | reads/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    marks = [m for m in (1, 5, 10, 20, 30, 40, 50, 60) if m < args.minutes] + [args.minutes]
    shown = {min(range(len(samples)), key=lambda i: abs(samples[i]["minute"] - m)) for m in marks}
    for i in sorted(shown):
        s, previous = samples[i], samples[i - 1] if i else {"minute": 0.0, "reads": 0.0}
        rate = (s["reads"] - previous["reads"]) / ((s["minute"] - previous["minute"]) * 60)
        print(
            f"| {s['minute']:.0f} | {s['rss']:.0f} | {s['block_cache']:.0f} | "
            f"{s['memtables']:.0f} | {s['table_readers']:.1f} | "
            f"{s['python_blocks']:.0f} | {s['malloc_in_use']:.0f} | "
            f"{s['malloc_free_held']:.0f} | {s['lag']:.0f} | {rate:,.0f} |"
        )
    print(f"\nlast half: RSS {min(rss):.0f}-{max(rss):.0f} MB, slope {slope:+.3f} MB/min")
    missing = expected.keys() - actual.keys()
    extra = actual.keys() - expected.keys()
    wrong = [k for k in expected.keys() & actual.keys() if expected[k] != actual[k]]
    exact = not (missing or extra or wrong)
    print(
        f"store {'EXACT' if exact else 'NOT EXACT'}: {len(actual):,} keys against "
        f"{len(expected):,}; missing {len(missing)}, extra {len(extra)}, wrong {len(wrong)}"
    )


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def main() -> None:
    if sys.argv[1:2] == ["--writer"]:
        bootstrap, topic, keys, rate, stop = sys.argv[2:7]
        writer(bootstrap, topic, int(keys), int(rate), stop)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=15_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--samples", help="also append every sample to this JSON-lines file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        broker = LocalKafka(port=free_port(), data_dir=workdir / "kafka", heap="1g")
        with broker:
            topic = "soak"
            create_topic(broker.bootstrap, topic)
            fill_topic(broker.bootstrap, topic, args.keys, "small batches")
            soak(broker.bootstrap, topic, workdir, args)


if __name__ == "__main__":
    main()
