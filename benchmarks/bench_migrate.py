"""Migration benchmark: the eager conversion of a store in an older layout or value format,
what it does to concurrent point reads, and how long a topic-to-topic switch takes.

    python benchmarks/bench_migrate.py                        # 1M keys; switch on a local broker
    python benchmarks/bench_migrate.py --keys 100000 --runs 1 # a quick check
    python benchmarks/bench_migrate.py --bootstrap-servers 127.0.0.1:9092

It is a script, not a test: it prints what it measured and PASS/MISS per target.

1. Eager conversion rate. One store of --keys keys (~150-byte JSON values) is built in layout
   0 (bare JSON), and one in layout 1 with value format 1. Each run takes a fresh RocksDB
   checkpoint of one and converts it: the store's chunked pass (migrate.Migration: bounded
   chunks, cursor in each chunk's batch), against the baseline, the fastest honest way to do
   the same rewrite, a loop over one iterator writing 10,000 values per WriteBatch with no
   cursor and no bounds. Variants alternate; medians of --runs.
2. Reader p99. A thread reads random keys (get + decode, what a query does) while another
   runs the chunked pass as the store thread does (one step, then a poll(0)-sized pause), and
   again with the store idle, in the same run: p99 during / p99 idle.
3. "v2 restored" -> "switched". A SwitchingStore answering from a v1 store switches to a v2
   store; the time from the v2 store's restore-end callback to the switch, median of --runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import rocksdict
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from globalstore import GlobalStore, StoreListener, SwitchingStore
from globalstore.codec import HEADER
from globalstore.converters import ValueFormats, decoder
from globalstore.localkafka import LocalKafka, free_port
from globalstore.shaping.migrate import Limits, Migration
from globalstore.storage import Storage
from globalstore.storage.meta import K_LAYOUT

BUILD_BATCH = 10_000
TARGET_RATE = 100_000  # keys/s
TARGET_P99_RATIO = 3.0
TARGET_SWITCH_MS = 100.0


def _value(i: int) -> bytes:
    return orjson.dumps(
        {
            "id": f"order-{i:07d}",
            "customer": f"c{i % 9973}",
            "total": i % 997,
            "status": "open",
            "items": [{"sku": f"s{i % 101}", "qty": 1 + i % 3}],
        }
    )


def v1_to_v2(value: dict[str, Any]) -> dict[str, Any]:
    return {**value, "total_cents": value["total"] * 100}


def build(path: Path, keys: int, layout: int) -> None:
    """A store of `keys` keys in layout 0 (bare JSON) or layout 1 with value format 1."""
    s = Storage(path)
    for start in range(0, keys, BUILD_BATCH):
        chunk = range(start, min(keys, start + BUILD_BATCH))
        if layout == 0:
            values = [(f"k{i:08d}".encode(), _value(i)) for i in chunk]
        else:
            values = [(f"k{i:08d}".encode(), HEADER.pack(1, 1, i, 0, i) + _value(i)) for i in chunk]
        s.write_values(values)
    s.write_values([], {K_LAYOUT: str(layout).encode()})
    s.close()


@contextlib.contextmanager
def fresh_copy(source: Path, work: Path) -> Iterator[Storage]:
    """A writable checkpoint of `source` (hard links), opened and loaded like a store."""
    dest = work / uuid.uuid4().hex
    dest.mkdir()
    src = Storage(source)
    try:
        src.checkpoint(dest / "db")
    finally:
        src.close()
    s = Storage(dest)
    s.load(s.read_meta())
    try:
        yield s
    finally:
        s.close()
        rocksdict.Rdict.destroy(str(dest / "db"))


def chunked(s: Storage, formats: ValueFormats) -> None:
    Migration(s, formats, "bench").run()


def one_pass(s: Storage, formats: ValueFormats) -> None:
    """The baseline: one iterator, 10,000 values per WriteBatch, no cursor, no bounds."""
    convert = _baseline_convert(formats)
    db = s._db
    wb = rocksdict.WriteBatch(raw_mode=True)
    for n, (key, raw) in enumerate(db.items(), 1):
        wb.put(key, convert(key, raw))
        if n % BUILD_BATCH == 0:
            db.write(wb)
            wb = rocksdict.WriteBatch(raw_mode=True)
    db.write(wb)


def _baseline_convert(formats: ValueFormats) -> Callable[[bytes, bytes], bytes]:
    if formats.plain:
        return lambda key, raw: HEADER.pack(1, 1, -1, -1, -1) + raw
    return lambda key, raw: formats.rewrite(raw, key, "bench") or raw


def rates(sources: Mapping[str, tuple[Path, ValueFormats]], work: Path, keys: int, runs: int):
    results: dict[tuple[str, str], list[float]] = {}
    variants = {"chunked (store)": chunked, "one pass (baseline)": one_pass}
    for run in range(runs):
        for name, (source, formats) in sources.items():
            order = list(variants.items())
            if run % 2:
                order.reverse()  # alternate which variant goes first
            for variant, convert in order:
                with fresh_copy(source, work) as s:
                    began = time.perf_counter()
                    convert(s, formats)
                    seconds = time.perf_counter() - began
                results.setdefault((name, variant), []).append(keys / seconds)
    return {k: statistics.median(v) for k, v in results.items()}


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def read_latencies(s: Storage, decode_fn: Callable[..., Any], keys: int, stop: Callable[[], bool]):
    """Point-read latencies (get + decode, in µs) of random keys until stop()."""
    rng = random.Random(7)
    get = s.point_get()
    out: list[float] = []
    while not stop():
        k = f"k{rng.randrange(keys):08d}".encode()
        t = time.perf_counter()
        decode_fn(get(k), k, "bench")
        out.append((time.perf_counter() - t) * 1e6)
    return out


def reader_p99(source: Path, formats: ValueFormats, work: Path, keys: int, idle_s: float):
    """(idle p99, p99 during the chunked pass, reads during it) on one fresh copy."""
    decode_fn = decoder(formats)
    with fresh_copy(source, work) as s:
        until = time.monotonic() + idle_s
        idle = read_latencies(s, decode_fn, keys, lambda: time.monotonic() >= until)
        migration = Migration(s, formats, "bench")
        migration.begin()
        done = threading.Event()

        def store_thread() -> None:
            while not migration.step(Limits()):
                time.sleep(0)  # where the store thread polls Kafka with a zero timeout
            done.set()

        worker = threading.Thread(target=store_thread)
        worker.start()
        during = read_latencies(s, decode_fn, keys, done.is_set)
        worker.join()
    return _p99(idle), _p99(during), len(during)


class RestoreEnd(StoreListener):
    def __init__(self) -> None:
        self.at: float | None = None

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        self.at = time.monotonic()


def switch_times(bootstrap: str, work: Path, runs: int, keys: int = 10_000) -> list[float]:
    """ms from the v2 store's restore end to the switch, per run."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = []
    for run in range(runs):
        topics = [f"bench-switch-{uuid.uuid4().hex[:8]}-v{v}" for v in (1, 2)]
        futures = admin.create_topics(
            [NewTopic(t, 3, 1, config={"cleanup.policy": "compact"}) for t in topics]
        )
        for f in futures.values():
            f.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        for t in topics:
            for i in range(keys):
                producer.produce(t, key=f"k{i:08d}".encode(), value=_value(i))
                if i % 10_000 == 0:
                    producer.poll(0)
        assert producer.flush(60) == 0
        v1 = GlobalStore(topics[0], bootstrap, work / f"v1-{run}").start(timeout=120)
        ended = RestoreEnd()
        v2 = GlobalStore(topics[1], bootstrap, work / f"v2-{run}", listeners=[ended])
        with SwitchingStore(v1) as store:
            assert store.switch_to(v2, timeout=120, remove_old=True)
            assert ended.at is not None and store.switched_at is not None
            out.append((store.switched_at - ended.at) * 1000)
        admin.delete_topics(topics)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap-servers", help="an existing broker (else a local one)")
    parser.add_argument("--work-dir", type=Path, help="where the stores go (default: a temp dir)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        work = Path(tmp)
        plain = ValueFormats()
        two = ValueFormats(2, {1: v1_to_v2})
        began = time.perf_counter()
        build(work / "layout0", args.keys, 0)
        build(work / "format1", args.keys, 1)
        print(f"built two stores of {args.keys:,} keys in {time.perf_counter() - began:.1f}s")
        sources = {
            "layout 0 -> 1": (work / "layout0", plain),
            "value format 1 -> 2": (work / "format1", two),
        }
        print(f"\n1. eager conversion rate, keys/s (median of {args.runs})")
        for (name, variant), rate in rates(sources, work, args.keys, args.runs).items():
            verdict = "" if "baseline" in variant else _verdict(rate >= TARGET_RATE)
            print(f"   {name:<20} {variant:<20} {rate:>12,.0f} {verdict}")
        print("\n2. reader point-get p99 (µs), idle vs during the chunked pass")
        for name, (source, formats) in sources.items():
            idle, during, reads = reader_p99(source, formats, work, args.keys, 3.0)
            ratio = during / idle
            print(
                f"   {name:<20} idle {idle:8.1f}  during {during:8.1f}  ({reads:,} reads) "
                f"x{ratio:.1f} {_verdict(ratio <= TARGET_P99_RATIO)}"
            )
        with _broker(args.bootstrap_servers, work) as bootstrap:
            ms = switch_times(bootstrap, work, args.runs)
        print(
            f"\n3. 'v2 restored' -> 'switched' (ms): median {statistics.median(ms):.2f}, "
            f"max {max(ms):.2f} over {len(ms)} {_verdict(max(ms) < TARGET_SWITCH_MS)}"
        )


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


@contextlib.contextmanager
def _broker(bootstrap: str | None, work: Path) -> Iterator[str]:
    if bootstrap is not None:
        yield bootstrap
        return
    with LocalKafka(port=free_port(), data_dir=work / "kafka") as kafka:
        yield kafka.bootstrap


if __name__ == "__main__":
    main()
