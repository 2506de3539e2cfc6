"""Pipeline throughput vs. a read-only ceiling, and stream-mode freshness into a GlobalStore.

    python benchmarks/bench_pipeline.py [--bootstrap-servers HOST:PORT] [--events 1000000]

Without --bootstrap-servers a local broker is started in a temporary directory. Results
are printed and written to the "## Pipeline" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
from confluent_kafka.admin import AdminClient, NewTopic

from globalstore import GlobalStore
from globalstore.localkafka import LocalKafka, free_port
from pipelines import skeleton
from pipelines.generate import RawRecord, StreamShape, generate, produce
from pipelines.orders import ORDERS
from pipelines.session import build_session

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "## Pipeline"


@contextlib.contextmanager
def broker(bootstrap: str | None, scratch: Path) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
    else:
        with LocalKafka(port=free_port(), data_dir=scratch / "kafka", heap="1g") as kafka:
            yield kafka.bootstrap


def new_topic(bootstrap: str, prefix: str, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def options(bootstrap: str, source: str, scratch: Path, mode: str = "batch") -> skeleton.RunOptions:
    run = uuid.uuid4().hex[:8]
    return skeleton.RunOptions(
        bootstrap_servers=bootstrap,
        source_topic=source,
        target_topic=f"bench-current-{run}",
        dead_letter_topic=f"bench-dlq-{run}",
        checkpoint_dir=scratch / f"checkpoint-{run}",
        mode="stream" if mode == "stream" else "batch",
    )


def time_ceiling(spark, bootstrap: str, source: str, scratch: Path) -> float:  # type: ignore[no-untyped-def]
    """Same source, same trigger, no work: read every record and drop it."""
    started = time.perf_counter()
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(scratch / f"ceiling-{uuid.uuid4().hex[:8]}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def time_pipeline(spark, bootstrap: str, source: str, scratch: Path) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    skeleton.run(spark, ORDERS, options(bootstrap, source, scratch))
    return time.perf_counter() - started


def freshness(spark, bootstrap: str, scratch: Path, samples: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds from producing a new order's event to seeing it in a GlobalStore."""
    source = new_topic(bootstrap, "bench-fresh-raw")
    run_options = options(bootstrap, source, scratch, mode="stream")
    produce(bootstrap, source, [_created("warm-up")])
    running = skeleton.start(spark, ORDERS, run_options)
    store_path = scratch / f"store-{uuid.uuid4().hex[:8]}"
    store = GlobalStore(
        topic=run_options.target_topic, bootstrap_servers=bootstrap, path=str(store_path)
    )
    try:
        while running.summary.batches == 0:
            time.sleep(0.1)
        store.start(60)
        latencies = []
        for i in range(samples):
            key = f"fresh-{i:05d}"
            produced = time.perf_counter()
            produce(bootstrap, source, [_created(key)])
            while store.get(key) is None:
                time.sleep(0.005)
            latencies.append(time.perf_counter() - produced)
            time.sleep(0.137)  # drift against the trigger so samples land at every phase
        return latencies
    finally:
        store.close()
        running.stop()


def _created(order_id: str) -> RawRecord:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    event = {"order_id": order_id, "courier_id": "c-1", "status": "CREATED", "lat": 1.0,
             "lon": 2.0, "event_time": now}  # fmt: skip
    return RawRecord(order_id.encode(), orjson.dumps(event))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def write_section(text: str) -> None:
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    start = doc.find(SECTION + "\n")
    if start < 0:
        doc = doc.rstrip("\n") + "\n\n" + text
    else:
        end = doc.find("\n## ", start + len(SECTION))
        doc = doc[:start] + text + (doc[end + 1 :] if end >= 0 else "")
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory() as tmp,
        broker(args.bootstrap_servers, Path(tmp)) as bootstrap,
    ):
        scratch = Path(tmp)
        shape = StreamShape(orders=args.orders, max_moves=14, bad_every=1000)
        records = generate(shape, seed=7)[: args.events]
        source = new_topic(bootstrap, "bench-raw")
        produce(bootstrap, source, records)
        spark = build_session(master="local[2]", shuffle_partitions=2)
        spark.sparkContext.setLogLevel("ERROR")
        time_pipeline(spark, bootstrap, source, scratch)  # warm-up: JIT, Python workers
        ceiling = [time_ceiling(spark, bootstrap, source, scratch) for _ in range(args.runs)]
        full = [time_pipeline(spark, bootstrap, source, scratch) for _ in range(args.runs)]
        fresh = freshness(spark, bootstrap, scratch, args.samples)
        spark.stop()

    n = len(records)
    ceiling_rate, full_rate = n / statistics.median(ceiling), n / statistics.median(full)
    p50, p99 = percentile(fresh, 0.5), percentile(fresh, 0.99)
    report = (
        f"{SECTION}\n\n"
        f"`python benchmarks/bench_pipeline.py` — {dt.date.today()}, {platform.node()}, "
        f"{platform.machine()}, Spark local[2], shuffle partitions 2, "
        f"medians of {args.runs} runs.\n"
        f"{n:,} raw events over {args.orders:,} orders (2 raw partitions).\n\n"
        "| measure | result | target |\n|---|---|---|\n"
        f"| ceiling: read + count only | {ceiling_rate:,.0f} events/s "
        f"({statistics.median(ceiling):.1f} s) | |\n"
        f"| full batch pipeline | {full_rate:,.0f} events/s ({statistics.median(full):.1f} s) | |\n"
        f"| pipeline / ceiling | {full_rate / ceiling_rate:.0%} | ≥ 40% |\n"
        f"| freshness p50 (stream, 1 s trigger) | {p50:.2f} s | ≤ 1.5 s |\n"
        f"| freshness p99 | {p99:.2f} s | ≤ 3 s |\n"
    )
    print(report)
    if not args.no_write:
        write_section(report)


if __name__ == "__main__":
    main()
