"""The event loop's lag while an AsyncGlobalStore restores a topic: does anything the store
does block the loop a web service answers on?

    python benchmarks/bench_aio_lag.py [--keys 1000000] [--restore-batch-size N]
        [--bootstrap-servers HOST:PORT]

A ticker coroutine sleeps 5 ms in a loop and records how late each wake-up is (the loop's
lag: how long something held it). It runs first alone (the baseline), then while
`await store.start()` restores --keys distinct keys (~200-byte JSON values, 6 partitions,
written once before), then while `await store.wait_for(...)` waits for 20 writes of 10,000
records that another process makes after the restore. Prints p50/p99/max of the lag in each
phase, and when its three longest lags ended. Without --bootstrap-servers it starts a local
broker.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench_store import create_topic, fill_topic, machine
from confluent_kafka import Producer

from globalstore.aio import AsyncGlobalStore
from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.localkafka import LocalKafka, free_port

TICK_S = 0.005


Lags = list[tuple[float, float]]  # (when the late tick ended, seconds late)


async def _tick(lags: Lags, stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.perf_counter()
        await asyncio.sleep(TICK_S)
        ended = time.perf_counter()
        lags.append((ended, ended - began - TICK_S))


def _row(phase: str, lags: Lags, began: float) -> str:
    """The phase's p50/p99/max, and when (seconds into it) its three longest lags ended."""
    ms = sorted(lag * 1000 for _, lag in lags)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    worst = sorted(lags, key=lambda tick: tick[1])[-3:]
    when = ", ".join(f"{lag * 1000:.0f} ms at {at - began:.1f} s" for at, lag in worst)
    return (
        f"| {phase} | {statistics.median(ms):.2f} | {p99:.2f} | {ms[-1]:.2f} | {len(ms)} | {when} |"
    )


async def _measure(
    bootstrap: str, topic: str, path: Path, keys: int, settings: dict[str, Any]
) -> list[str]:
    rows = []
    stop, lags, began = asyncio.Event(), [], time.perf_counter()
    ticker = asyncio.create_task(_tick(lags, stop))
    await asyncio.sleep(2)
    stop.set()
    await ticker
    rows.append(_row("idle loop (baseline)", lags, began))

    store = AsyncGlobalStore(topic, bootstrap, path, **settings)
    stop, lags, began = asyncio.Event(), [], time.perf_counter()
    ticker = asyncio.create_task(_tick(lags, stop))
    await store.start(timeout=600)
    took = time.perf_counter() - began
    stop.set()
    await ticker
    rows.append(_row(f"restoring {keys:,} records in {took:.1f} s", lags, began))

    # Following: 20 writes of 10k keys each, made by another process (a producer thread here
    # would hold the GIL itself), each awaited with wait_for.
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as writer:
        await loop.run_in_executor(writer, _write, bootstrap, topic, 1)  # the process started
        stop, lags, began = asyncio.Event(), [], time.perf_counter()
        ticker = asyncio.create_task(_tick(lags, stop))
        for _ in range(20):
            written = await loop.run_in_executor(writer, _write, bootstrap, topic, 10_000)
            assert await store.wait_for(written, timeout=60)
        stop.set()
        await ticker
    rows.append(_row("following 20 x 10,000 records, awaiting wait_for", lags, began))
    await store.close()
    return rows


def _write(bootstrap: str, topic: str, count: int) -> dict[int, int]:
    """Produce `count` records; {partition: the offset after the last one written there}."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    headers, written = format_headers(), {}

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            written[msg.partition()] = max(written.get(msg.partition(), 0), msg.offset() + 1)

    for i in range(count):
        key, value = encode_key(f"new-{i}"), encode_value({"i": i})
        while True:
            try:
                producer.produce(topic, key, value, headers=headers, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(60) != 0:
        raise RuntimeError("records left unacknowledged")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument(
        "--restore-batch-size", type=int, help="the store's restore_batch_size (default 10,000)"
    )
    args = parser.parse_args()
    settings = (
        {} if args.restore_batch_size is None else {"restore_batch_size": args.restore_batch_size}
    )
    with tempfile.TemporaryDirectory(prefix="bench-aio-") as work:
        workdir = Path(work)
        if args.bootstrap_servers:
            run(args.bootstrap_servers, "(existing cluster)", workdir, args.keys, settings)
            return
        broker = LocalKafka(port=free_port(), data_dir=workdir / "kafka", heap="1g")
        with broker:
            run(broker.bootstrap, broker.status().version, workdir, args.keys, settings)


def run(
    bootstrap: str, kafka_version: str, workdir: Path, keys: int, settings: dict[str, Any]
) -> None:
    topic = f"bench-aio-{int(time.time())}"
    create_topic(bootstrap, topic)
    print(f"writing {keys:,} records to {topic}", file=sys.stderr)
    fill_topic(bootstrap, topic, keys, "large batches")
    rows = asyncio.run(_measure(bootstrap, topic, workdir / "store", keys, settings))
    print(f"Event loop lag (ms), 5 ms ticker, store settings {settings}; {machine(kafka_version)}")
    print("| phase | p50 | p99 | max | ticks | longest three |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
