"""get() of hot keys with and without the cache of decoded values (ValueCache), on a store
restored from a real broker, the two alternating round by round:

    python benchmarks/bench_hot_reads.py                      # 100k keys, 10k hot, 3 rounds
    python benchmarks/bench_hot_reads.py --rounds 5 --seconds 8

In each round, for each of "off" and "on" (which goes first alternates), one GlobalStore
(restored once, then reopened in each round) and its hot keys read once before, then:
  idle          per-get latency (p50, p99) of random hot keys, one thread, no writes; and
                the rate of a tight loop of get over the hot keys;
  following     the same while another process produces --rate records/s to random keys
                of the whole topic (some of them hot, which their writes then replace);
  3 readers     three threads looping get over the hot keys while following, their total
                reads/s, and produce->visible (wait_for) sampled meanwhile.
Latency is timed around each get with perf_counter (which itself adds ~0.1 µs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from bench_store import (
    create_topic,
    fill_topic,
    key_of,
    latency_producer,
    machine,
    quantile,
)

from globalstore import GlobalStore, StoreConfig, ValueCache
from globalstore.localkafka import LocalKafka, free_port

BENCH_STORE = Path(__file__).resolve().parent / "bench_store.py"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def open_store(bootstrap: str, topic: str, path: Path, cached: bool, hot: int) -> GlobalStore:
    cache = ValueCache(entries=hot, max_bytes=64 << 20) if cached else None
    config = StoreConfig(topic=topic, bootstrap_servers=bootstrap, path=path, value_cache=cache)
    return GlobalStore.from_config(config).start(timeout=900)


def latencies(store: GlobalStore, keys: list[str], seconds: float) -> list[float]:
    """Per-get seconds of random keys of `keys` for `seconds`."""
    rng, get, out, clock = random.Random(5), store.get, [], time.perf_counter
    picks = [rng.choice(keys) for _ in range(100_000)]
    began = clock()
    while clock() - began < seconds:
        for k in picks:
            t0 = clock()
            get(k)
            out.append(clock() - t0)
    return out


def loop_rate(store: GlobalStore, keys: list[str], passes: int = 5) -> float:
    """gets/s of a tight loop over `keys`, `passes` times."""
    get = store.get
    began = time.perf_counter()
    for _ in range(passes):
        for k in keys:
            get(k)
    return passes * len(keys) / (time.perf_counter() - began)


def readers(
    store: GlobalStore, keys: list[str], stop: threading.Event
) -> tuple[list[threading.Thread], list[int]]:
    """Three threads looping get over `keys` until `stop`, and the gets each made (filled
    in as each ends)."""
    counts = [0, 0, 0]

    def loop(i: int) -> None:
        get, n = store.get, 0
        while not stop.is_set():
            for k in keys:
                get(k)
            n += len(keys)
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    return threads, counts


def visible(store: GlobalStore, bootstrap: str, topic: str, samples: int) -> list[float]:
    """produce->visible seconds through wait_for, `samples` times."""
    producer, out = latency_producer(bootstrap), []
    delivered: list[tuple[int, int]] = []

    def on_delivery(err: object, msg: object) -> None:
        delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    for i in range(samples):
        delivered.clear()
        began = time.perf_counter()
        producer.produce(topic, key=f"latency-{i % 100}".encode(), value=b'{"i": 1}',
                         on_delivery=on_delivery)  # fmt: skip
        producer.flush(10)
        p, o = delivered[0]
        if not store.wait_for({p: o + 1}, timeout=10):
            raise RuntimeError(f"offset {o} of partition {p} never became visible")
        out.append(time.perf_counter() - began)
        time.sleep(0.01)
    return out


def writer(
    bootstrap: str, topic: str, keys: int, rate: int
) -> tuple[subprocess.Popen[bytes], Path]:
    stop = Path(tempfile.mkdtemp()) / "stop"
    cmd = [sys.executable, str(BENCH_STORE), "--writer", bootstrap, topic, str(keys), str(rate),
           str(stop)]  # fmt: skip
    return subprocess.Popen(cmd), stop


def one_round(
    store: GlobalStore, bootstrap: str, topic: str, args: argparse.Namespace, hot: list[str]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in hot:
        store.get(k)
    idle = latencies(store, hot, args.seconds)
    out["idle p50 µs"] = quantile(idle, 0.5) * 1e6
    out["idle p99 µs"] = quantile(idle, 0.99) * 1e6
    out["idle loop gets/s"] = loop_rate(store, hot)
    proc, stop = writer(bootstrap, topic, args.keys, args.rate)
    try:
        time.sleep(1.0)  # the writer reaches its pace
        before, began = sum(store.position().values()), time.perf_counter()
        busy = latencies(store, hot, args.seconds)
        out["following p50 µs"] = quantile(busy, 0.5) * 1e6
        out["following p99 µs"] = quantile(busy, 0.99) * 1e6
        out["following loop gets/s"] = loop_rate(store, hot)
        out["applied rec/s"] = (sum(store.position().values()) - before) / (
            time.perf_counter() - began
        )
        halt = threading.Event()
        threads, counts = readers(store, hot, halt)
        began = time.perf_counter()
        seen = visible(store, bootstrap, topic, args.samples)
        halt.set()
        for t in threads:
            t.join()
        out["3 readers total gets/s"] = sum(counts) / (time.perf_counter() - began)
        out["3 readers visible p50 ms"] = quantile(seen, 0.5) * 1e3
        out["3 readers visible p99 ms"] = quantile(seen, 0.99) * 1e3
    finally:
        stop.touch()
        proc.wait(60)
    return out


# flag, type, default, help
OPTIONS = [
    ("--keys", int, 100_000, "keys in the topic"),
    ("--hot", int, 10_000, "hot keys (and cache entries)"),
    ("--rounds", int, 3, "rounds, each of both stores"),
    ("--seconds", float, 5.0, "per latency measurement"),
    ("--rate", int, 10_000, "records/s while following"),
    ("--samples", int, 300, "produce->visible samples"),
    ("--bootstrap-servers", str, None, "Use this broker instead of a fresh one."),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, kind, default, help_text in OPTIONS:
        parser.add_argument(flag, type=kind, default=default, help=help_text)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-hot-") as tmp,
        kafka(args.bootstrap_servers, Path(tmp)) as (bootstrap, version),
    ):
        measure(args, bootstrap, version, Path(tmp))


@contextlib.contextmanager
def kafka(given: str | None, workdir: Path) -> Iterator[tuple[str, str]]:
    """(bootstrap, Kafka version): the broker `given`, else a local one for the run."""
    if given:
        yield given, "(existing cluster)"
        return
    log("starting a local Kafka broker")
    with LocalKafka(port=free_port(), data_dir=workdir / "kafka", heap="1g") as broker:
        yield broker.bootstrap, broker.status().version


def measure(args: argparse.Namespace, bootstrap: str, version: str, workdir: Path) -> None:
    log(machine(version))
    topic = f"bench-hot-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    fill_topic(bootstrap, topic, args.keys, "small batches")
    hot = [key_of(i) for i in random.Random(3).sample(range(args.keys), args.hot)]
    results: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
    load = os.getloadavg()[0]
    for r in range(args.rounds):
        for name in ["off", "on"] if r % 2 == 0 else ["on", "off"]:
            store = open_store(bootstrap, topic, workdir / name, name == "on", args.hot)
            try:
                got = one_round(store, bootstrap, topic, args, hot)
            finally:
                store.close()
            shown = ", ".join(f"{k} {v:,.1f}" for k, v in got.items())
            log(f"round {r + 1}, cache {name}: {shown}")
            for k, v in got.items():
                results[name].setdefault(k, []).append(v)
    log(f"load average (1 min) before {load:.2f}, after {os.getloadavg()[0]:.2f}")
    print(f"\n| median of {args.rounds} rounds (raw) | cache off | cache on |")
    print("|---|---|---|")
    for k in results["off"]:
        cells = []
        for name in ("off", "on"):
            raw = results[name][k]
            cells.append(f"{statistics.median(raw):,.1f} ({' / '.join(f'{v:,.1f}' for v in raw)})")
        print(f"| {k} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
