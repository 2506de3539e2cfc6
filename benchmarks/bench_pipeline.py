"""Pipeline throughput vs. a read-only ceiling, and stream-mode freshness into a GlobalStore.

Beside the ceiling, two floors show what any pipeline over this JSON topic pays before its
own work: the read plus validation's JSON parse, and the read plus the whole validation.
The same events as Avro (Confluent wire format) in a second topic get the same batch run,
beside that topic's own read ceiling and its validation floor.

    python benchmarks/bench_pipeline.py [--bootstrap-servers HOST:PORT] [--events 1000000]
        [--orders 100000] [--runs 3] [--rate 200] [--seconds 60] [--write-docs]

Without --bootstrap-servers a local broker is started in a temporary directory. Results
are printed (PASS/MISS per target); --write-docs replaces the "## Pipeline" section of
benchmarks/results/latest.md, leaving every other section as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import platform
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
import pyspark
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from globalstore import GlobalStore
from globalstore.localkafka import LocalKafka, free_port
from pipelines import skeleton
from pipelines.avro import validate_avro
from pipelines.defaults import TRIGGER_INTERVAL
from pipelines.orders.avro_events import SCHEMA_TEXT, as_avro
from pipelines.orders.generator import StreamShape, generate, iso_utc, produce
from pipelines.orders.transform import ORDERS, STATE_BUCKETS
from pipelines.session import build_session
from pipelines.validate import fast_parse, validate

DOC = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "latest.md"
SECTION = "## Pipeline"
FINDINGS = "### Findings"  # hand-written; --write-docs keeps it
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
FRESH_ORDERS = 2000  # each gets an event every FRESH_ORDERS / rate seconds


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


@dataclass
class Profile:
    """Where one batch run's time went, from its query progress (ms, summed over batches)."""

    batches: int = 0
    phases: dict[str, int] = field(default_factory=dict)
    state_update_ms: int = 0  # allUpdatesTimeMs: summed over state partitions (tasks)
    state_commit_ms: int = 0
    state_rows: int = 0

    @classmethod
    def of(cls, progresses: list[dict[str, Any]]) -> Profile:
        profile = cls()
        for progress in progresses:
            if not progress["numInputRows"]:
                continue
            profile.batches += 1
            for phase, ms in progress["durationMs"].items():
                profile.phases[phase] = profile.phases.get(phase, 0) + ms
            for operator in progress["stateOperators"]:
                profile.state_update_ms += operator["allUpdatesTimeMs"]
                profile.state_commit_ms += operator["commitTimeMs"]
                profile.state_rows = operator["numRowsTotal"]
        return profile


Work = Callable[[DataFrame], DataFrame]


def parse_only(raw: DataFrame) -> DataFrame:
    """Validation's one JSON pass (`from_json` with the fields' schema), nothing else."""
    text = sf.col("value").cast("string")
    return raw.select(fast_parse(text, ORDERS.fields).alias("parsed")).select("parsed.*")


def validate_only(raw: DataFrame) -> DataFrame:
    return validate(raw, ORDERS.fields, ORDERS.max_record_bytes)


AVRO_SCHEMAS = {1: SCHEMA_TEXT}


def validate_avro_only(raw: DataFrame) -> DataFrame:
    return validate_avro(raw, ORDERS.fields, ORDERS.max_record_bytes, AVRO_SCHEMAS)


CEILING = "ceiling: read + discard"
# The ceiling and the floors: (row label, work on the raw rows before they are dropped).
READS: tuple[tuple[str, Work], ...] = (
    (CEILING, lambda raw: raw),
    ("floor: read + JSON parse (validation's `from_json`), discard", parse_only),
    ("floor: read + the job's validation, discard", validate_only),
)
AVRO_CEILING = "Avro topic, ceiling: read + discard"
AVRO_READS: tuple[tuple[str, Work], ...] = (
    (AVRO_CEILING, lambda raw: raw),
    ("Avro topic, floor: read + the job's Avro validation, discard", validate_avro_only),
)


def time_read(spark: SparkSession, bootstrap: str, source: str, scratch: Path, work: Work) -> float:
    """Same source, same trigger as the pipeline: read every record, `work`, drop (noop)."""
    started = time.perf_counter()
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        work(raw)
        .writeStream.format("noop")
        .option("checkpointLocation", str(scratch / f"read-{uuid.uuid4().hex[:8]}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def avro_options(bootstrap: str, source: str, scratch: Path) -> skeleton.RunOptions:
    return dataclasses.replace(options(bootstrap, source, scratch), avro_schemas=AVRO_SCHEMAS)


def time_pipeline(spark: SparkSession, run_options: skeleton.RunOptions) -> tuple[float, Profile]:
    """One batch run (give it a fresh checkpoint and fresh output topics)."""
    started = time.perf_counter()
    running = skeleton.start(spark, ORDERS, run_options)
    running.wait()
    elapsed = time.perf_counter() - started
    return elapsed, Profile.of([orjson.loads(p.json) for p in running.query.recentProgress])


class FreshnessProbe:
    """Produce marked events at a steady rate; time each until a GlobalStore shows it.

    Event i updates order fresh-(i mod FRESH_ORDERS) with courier_id m-i (the marker) and
    event_time = now, so it is always the order's latest event.
    """

    def __init__(self, bootstrap: str, source: str, store: GlobalStore) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._source, self._store = source, store
        self._pending: dict[int, float] = {}  # marker -> produce time
        self._lock = threading.Lock()
        self._next_marker = 0  # markers stay unique across runs
        self.latencies: list[float] = []

    def run(self, rate: float, seconds: float) -> list[float]:
        """Produce for `seconds`; return this run's latencies (s)."""
        self.latencies = []
        checker = threading.Thread(target=self._check_until_done, daemon=True)
        checker.start()
        started, first = time.perf_counter(), self._next_marker
        for i in range(round(rate * seconds)):
            time.sleep(max(0.0, started + i / rate - time.perf_counter()))
            self._send(first + i)
        self._next_marker = first + round(rate * seconds)
        self._producer.flush(30)
        checker.join(60)
        return self.latencies

    def _send(self, i: int) -> None:
        now_ms = time.time_ns() // 1_000_000
        order_id = f"fresh-{i % FRESH_ORDERS:05d}"
        event = {"order_id": order_id, "courier_id": f"m-{i}", "status": "IN_TRANSIT",
                 "lat": 52.5, "lon": 13.4, "event_time": iso_utc(now_ms)}  # fmt: skip
        with self._lock:
            self._pending[i] = time.perf_counter()
        self._producer.produce(self._source, orjson.dumps(event), order_id.encode())
        self._producer.poll(0)

    def _check_until_done(self) -> None:
        deadline = None
        while True:
            with self._lock:
                pending = list(self._pending.items())
            if not pending:
                if deadline is not None and time.perf_counter() > deadline:
                    return
                deadline = deadline or time.perf_counter() + 2.0
            for marker, produced in pending:
                value = self._store.get(f"fresh-{marker % FRESH_ORDERS:05d}")
                shown = value is not None and int(value["courier_id"][2:]) >= marker
                if shown:  # a later marker for the same order also proves this one arrived
                    seen = time.perf_counter()
                    with self._lock:
                        del self._pending[marker]
                    self.latencies.append(seen - produced)
            time.sleep(0.005)


def freshness(
    spark: SparkSession,
    run_options: skeleton.RunOptions,
    scratch: Path,
    rate: float,
    seconds: float,
) -> tuple[list[float], Profile]:
    """Seconds from producing an event to seeing its effect in a GlobalStore (stream mode,
    on whatever state `run_options`' checkpoint holds)."""
    bootstrap, source = run_options.bootstrap_servers, run_options.source_topic
    running = skeleton.start(spark, ORDERS, run_options)
    store = GlobalStore(
        topic=run_options.target_topic,
        bootstrap_servers=bootstrap,
        path=str(scratch / f"store-{uuid.uuid4().hex[:8]}"),
    )
    try:
        store.start(300)
        # Warm-up (not measured): the first batches plan the query, start Python workers.
        probe = FreshnessProbe(bootstrap, source, store)
        probe.run(rate, min(seconds, 10.0))
        started_batches = running.query.lastProgress["batchId"]
        latencies = probe.run(rate, seconds)
        progresses = [orjson.loads(p.json) for p in running.query.recentProgress]
        measured = [p for p in progresses if p["batchId"] > started_batches]
        return latencies, Profile.of(measured)
    finally:
        store.close()
        running.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {memory:.1f} GiB RAM, {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}, PySpark {pyspark.__version__}, "
        f"pandas {version('pandas')}, pyarrow {version('pyarrow')}, Java 17"
    )


def read_rows(
    n: int, reads: dict[str, list[float]], medians: dict[str, float], ceiling: str = CEILING
) -> str:
    """Table rows of a ceiling and its floors (READS' labels): every time and the median."""
    rows = []
    for label, seconds in medians.items():
        share = "" if label == ceiling else f", {medians[ceiling] / seconds:.0%} of the ceiling"
        raw = ", ".join(f"{t:.1f}" for t in reads[label])
        rows.append(
            f"| {label} | {n / seconds:,.0f} events/s ({seconds:.1f} s{share}) | | | {raw} |\n"
        )
    return "".join(rows)


def freshness_rows(state: str, latencies: list[float]) -> str:
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    return (
        f"| freshness p50, {state} | {p50:.2f} s | ≤ 1.0 s | {verdict(p50 <= 1.0)} | |\n"
        f"| freshness p99, {state} | {p99:.2f} s | ≤ 2.0 s | {verdict(p99 <= 2.0)} | "
        f"{len(latencies)} samples, max {max(latencies, default=0):.2f} |\n"
    )


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def profile_table(profiles: dict[str, Profile]) -> str:
    names = list(profiles)
    rows = ["| ms | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    phase_rows = [(phase, [p.phases.get(phase, 0) for p in profiles.values()]) for phase in PHASES]
    phase_rows += [
        (
            "triggerExecution (whole batch)",
            [p.phases.get("triggerExecution", 0) for p in profiles.values()],
        ),
        ("state: allUpdatesTimeMs (sum of tasks)", [p.state_update_ms for p in profiles.values()]),
        ("state: commitTimeMs", [p.state_commit_ms for p in profiles.values()]),
    ]
    for name, values in phase_rows:
        rows.append(f"| {name} | " + " | ".join(f"{v:,}" for v in values) + " |")
    rows.append("| batches | " + " | ".join(str(p.batches) for p in profiles.values()) + " |")
    rows.append(
        "| state rows (buckets) | "
        + " | ".join(str(p.state_rows) for p in profiles.values())
        + " |"
    )
    return "\n".join(rows) + "\n"


def write_section(text: str) -> None:
    """Replace the ## Pipeline section (up to the next ## heading); keep the rest byte for byte.

    The section's hand-written "### Findings" subsection, if any, is kept after the new text.
    """
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    start = doc.find(SECTION + "\n")
    if start < 0:
        doc += ("" if doc.endswith("\n") else "\n") + "\n" + text
    else:
        end = doc.find("\n## ", start + len(SECTION))
        old = doc[start:end] if end >= 0 else doc[start:]
        findings = old.find("\n" + FINDINGS)
        if findings >= 0:
            text += old[findings:]
        doc = doc[:start] + text + (doc[end:] if end >= 0 else "")
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (≥ 2)")
    parser.add_argument("--rate", type=float, default=200.0, help="freshness events/s")
    parser.add_argument("--seconds", type=float, default=60.0, help="freshness duration")
    parser.add_argument(
        "--write-docs", action="store_true", help="update benchmarks/results/latest.md"
    )
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory() as tmp,
        broker(args.bootstrap_servers, Path(tmp)) as bootstrap,
    ):
        scratch = Path(tmp)
        # Event times end an hour ago, so the ended orders' markers are all inside the
        # retention when the stream on top of the batch's state runs.
        start_ms = time.time_ns() // 1_000_000 - args.orders * 1000 - 3_600_000
        shape = StreamShape(orders=args.orders, max_moves=14, bad_every=1000, start_ms=start_ms)
        records = generate(shape, seed=7)[: args.events]
        source = new_topic(bootstrap, "bench-raw")
        produce(bootstrap, source, records)
        avro_source = new_topic(bootstrap, "bench-avro-raw")
        produce(bootstrap, avro_source, as_avro(records, schema_id=1))
        spark = build_session(master="local[2]", shuffle_partitions=2, avro=True)
        spark.sparkContext.setLogLevel("ERROR")
        sources = [(source, READS), (avro_source, AVRO_READS)]
        for topic, topic_reads in sources:  # warm-up: JIT, connectors, workers
            for _, work in topic_reads:
                time_read(spark, bootstrap, topic, scratch, work)
        time_pipeline(spark, options(bootstrap, source, scratch))
        time_pipeline(spark, avro_options(bootstrap, avro_source, scratch))
        reads: dict[str, list[float]] = {label: [] for label, _ in (*READS, *AVRO_READS)}
        full: list[tuple[float, Profile]] = []
        avro_full: list[float] = []
        for _ in range(max(2, args.runs)):  # alternate, so load changes hit all alike
            for topic, topic_reads in sources:
                for label, work in topic_reads:
                    reads[label].append(time_read(spark, bootstrap, topic, scratch, work))
            batch = options(bootstrap, source, scratch)
            full.append(time_pipeline(spark, batch))
            avro_full.append(time_pipeline(spark, avro_options(bootstrap, avro_source, scratch))[0])
            timings = ", ".join(f"{t[-1]:.1f}" for t in reads.values())
            print(
                f"ceilings, floors {timings} s; pipeline {full[-1][0]:.1f} s, "
                f"Avro {avro_full[-1]:.1f} s",
                flush=True,
            )
        empty = options(bootstrap, new_topic(bootstrap, "bench-fresh-raw"), scratch, "stream")
        fresh, fresh_profile = freshness(spark, empty, scratch, args.rate, args.seconds)
        # The last batch run's query, continued in stream mode: its state holds every order.
        loaded = dataclasses.replace(batch, mode="stream")
        loaded_fresh, loaded_profile = freshness(spark, loaded, scratch, args.rate, args.seconds)
        spark.stop()

    n = len(records)
    medians = {label: statistics.median(times) for label, times in reads.items()}
    read_s = {label: medians[label] for label, _ in READS}
    avro_read_s = {label: medians[label] for label, _ in AVRO_READS}
    ceiling_s = read_s[CEILING]
    full_s = statistics.median(t for t, _ in full)
    avro_s = statistics.median(avro_full)
    median_profile = sorted(full, key=lambda run: run[0])[len(full) // 2][1]
    ratio = ceiling_s / full_s
    avro_ratio = avro_read_s[AVRO_CEILING] / avro_s
    report = (
        f"{SECTION}\n\n"
        f"Machine: {machine()}; {dt.date.today()}.\n\n"
        f"Command: `python benchmarks/bench_pipeline.py --events {args.events} "
        f"--orders {args.orders} --runs {args.runs} --write-docs`. Spark local[2], shuffle "
        f"partitions 2, {STATE_BUCKETS} state buckets, RocksDB state store; {n:,} raw events "
        f"over {args.orders:,} orders on 2 raw partitions; ceiling, floors and pipeline "
        f"alternate, {len(full)} timed runs each after a warm-up of each, medians. A floor "
        "is the read plus work every pipeline over this JSON topic does (the noop sink "
        "still builds every column, so the work is not optimised away). The Avro rows: the "
        "same events in the Confluent wire format (schema id 1, `.avsc` reader schema) in a "
        "second topic, read and run the same way, alternating with the JSON ones.\n\n"
        "| measure | result | target | verdict | raw (s) |\n|---|---|---|---|---|\n"
        + read_rows(n, reads, read_s)
        + f"| full batch pipeline | {n / full_s:,.0f} events/s ({full_s:.1f} s) | | | "
        f"{', '.join(f'{t:.1f}' for t, _ in full)} |\n"
        f"| pipeline / ceiling | {ratio:.0%} | ≥ 50% | {verdict(ratio >= 0.5)} | |\n"
        + read_rows(n, reads, avro_read_s, AVRO_CEILING)
        + f"| full batch pipeline, Avro input | {n / avro_s:,.0f} events/s ({avro_s:.1f} s) "
        f"| | | {', '.join(f'{t:.1f}' for t in avro_full)} |\n"
        f"| Avro pipeline / Avro topic's ceiling | {avro_ratio:.0%} | ≥ 50% | "
        f"{verdict(avro_ratio >= 0.5)} | |\n"
        + freshness_rows("empty state, new topic", fresh)
        + freshness_rows(f"on the batch run's state ({args.orders:,} orders)", loaded_fresh)
        + f"\nFreshness = produce call → the marked value returned by `GlobalStore.get` "
        f"(polled every 5 ms), {args.rate:.0f} events/s for {args.seconds:.0f} s after a "
        f"warm-up, {TRIGGER_INTERVAL} trigger, with the pipeline in stream "
        "mode and the store following its output. Twice: on an empty state in a new topic, "
        "and continuing the last batch run's query, whose state holds every order's events "
        "and ended markers (the generated event times end an hour before the run, inside "
        "the retention).\n\n"
        f"![Pipeline throughput against Spark's read ceiling]({THROUGHPUT_PNG})\n\n"
        f"![Stream freshness, cumulative distribution]({FRESHNESS_PNG})\n\n"
        "### Where the time goes (query progress, summed over a run's batches)\n\n"
        + profile_table(
            {
                "batch run (median)": median_profile,
                "stream, empty state": fresh_profile,
                "stream, batch run's state": loaded_profile,
            }
        )
    )
    print(report)
    if args.write_docs:
        rates = {label: n / seconds for label, seconds in read_s.items()}
        draw(rates, n / full_s, {"empty state": fresh, "batch run's state": loaded_fresh})
        write_section(report)


THROUGHPUT_PNG = "img/pipeline-throughput.png"
FRESHNESS_PNG = "img/pipeline-freshness.png"


def draw(reads: dict[str, float], pipeline: float, fresh: dict[str, list[float]]) -> None:
    """`reads`: events/s of the ceiling and the floors (READS' labels), ceiling first."""
    import charts  # noqa: PLC0415 - matplotlib, only to draw

    ceiling = reads[CEILING]
    bars = [(label.split(",")[0].replace("`", ""), rate) for label, rate in reads.items()]
    charts.bars(
        DOC.parent / THROUGHPUT_PNG,
        "Batch run: median events/s",
        [*bars, ("orders pipeline", pipeline)],
        "events per second",
        ours=["orders pipeline"],
        target=ceiling / 2,
    )
    charts.distribution(
        DOC.parent / FRESHNESS_PNG,
        "Stream mode: produce → visible in a GlobalStore",
        fresh,
        "seconds",
        scale=1.0,
    )


if __name__ == "__main__":
    main()
