"""GlobalStore benchmark: restore, restart, gets, scan, follow latency and memory, side by side
with the ceiling a plain confluent-kafka consumer reaches on the same topic.

    python benchmarks/bench_store.py                   # 1M keys on a fresh local broker
    python benchmarks/bench_store.py --keys 100000     # a quick check
    python benchmarks/bench_store.py --bootstrap-servers 127.0.0.1:9092 --write-docs
    python benchmarks/bench_store.py --profile         # + cProfile of restore and get

It is a script, not a test: it prints a table with PASS/MISS per target and, with
--write-docs, replaces the "## Store" section of benchmarks/results/latest.md (nothing else
there); docs/performance.md is then updated from it by hand.
The peers (benchmarks/peers.py) need ktables (in the dev extra) and, for Kafka Streams,
java 17+ and mvn on the PATH.

    python benchmarks/bench_store.py --scaling 1000000,4000000,10000000 --rounds 1
        # restore rate, peak RSS and disk per key by size, instead of the table above
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import io
import json
import os
import platform
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import orjson
import peers
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from peers import peak_rss_mb

from globalstore import GlobalStore, StoreListener
from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.config import RocksDBOptions, StoreConfig
from globalstore.follow.thread import StoreThread
from globalstore.follow.topic import end_offsets
from globalstore.localkafka import LocalKafka, free_port
from globalstore.read.protocols import StoreReader

PARTITIONS = 6
MULTI_GET = 100  # keys per get_many call
Client = Mapping[str, str]  # Kafka client settings added to the connection (security)
NO_CLIENT: Client = {}
ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "benchmarks" / "results" / "latest.md"


# -- results -------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    value: float
    unit: str
    target: str = ""
    ok: bool | None = None  # None: no target
    raw: list[float] = field(default_factory=list)

    def shown(self) -> str:
        if self.unit == "rec/s" or self.unit == "ops/s":
            return f"{self.value:,.0f} {self.unit}"
        if self.unit == "%":
            return f"{self.value:.0f} %"
        return (
            f"{self.value:,.3f} {self.unit}"
            if self.value < 10
            else f"{self.value:,.1f} {self.unit}"
        )

    def verdict(self) -> str:
        return "" if self.ok is None else ("PASS" if self.ok else "MISS")


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- setup ---------------------------------------------------------------------------------


def key_of(i: int) -> str:
    return f"key-{i:08d}"


def value_of(i: int, pad: int) -> dict[str, Any]:
    return {
        "id": key_of(i),
        "customer": f"customer-{i % 50_000:05d}",
        "status": ("new", "paid", "shipped", "delivered")[i % 4],
        "amount": round((i * 37) % 100_000 / 100, 2),
        "items": i % 7 + 1,
        "updated_ms": 1_700_000_000_000 + i,
        "note": "x" * pad,
    }


def value_padding(target: int = 200) -> int:
    return max(0, target - len(orjson.dumps(value_of(0, 0))))


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, PARTITIONS, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([topic])[name].result(timeout=30)


# How the topic's producer packs its batches: a restore reads both kinds at different costs.
WRITERS = {
    # The Java producer's default batch size: a few dozen records per batch.
    "small batches": {"linger.ms": 5, "batch.size": 16_384, "compression.type": "lz4"},
    # librdkafka's default batch size with a long linger: thousands of records per batch.
    "large batches": {"linger.ms": 50, "batch.size": 1 << 20, "compression.type": "lz4"},
}


def fill_topic(
    bootstrap: str,
    topic: str,
    keys: int,
    writer: str,
    make: Callable[[int], Any] | None = None,
    shuffled: bool = False,
) -> float:
    """Produce `keys` distinct keys with ~200-byte JSON values (or `make(i)`), in increasing
    key order or `shuffled`; returns seconds taken."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 500_000, **WRITERS[writer]}
    )
    headers, pad = format_headers(), value_padding()
    began = time.perf_counter()
    order = random.Random(0).sample(range(keys), keys) if shuffled else range(keys)
    for i in order:
        value = encode_value(value_of(i, pad) if make is None else make(i))
        key = encode_key(key_of(i))
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records left unacknowledged")
    return time.perf_counter() - began


def ceiling(
    bootstrap: str, topic: str, total: int, like_store: bool = False, client: Client = NO_CLIENT
) -> float:
    """Records/s of a plain consumer reading the whole topic and discarding it. By default
    the fastest loop found: librdkafka's default fetch settings plus a 10 ms queue backoff
    (its default 1 s idles the loop whenever a queue fills). like_store: with the store's
    own settings instead (for information: the fetch path the store runs on). `client`
    adds connection settings (security)."""
    if like_store:
        conf = StoreConfig(
            topic=topic, bootstrap_servers=bootstrap, path=Path(".")
        ).consumer_config()
        conf.pop("statistics.interval.ms", None)
        conf["enable.partition.eof"] = False
    else:
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "fetch.queue.backoff.ms": 10,
        }
    consumer = Consumer({**conf, **client})
    try:
        began = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        n = 0
        while n < total:
            # The store's restore loop waits at most 0.05 s per consume() call, too.
            n += len(consumer.consume(num_messages=10_000, timeout=0.05))
        return n / (time.perf_counter() - began)
    finally:
        consumer.close()


class Counter(StoreListener):
    def __init__(self) -> None:
        self.records = 0
        self.seconds = 0.0

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        self.records, self.seconds = total_records, seconds


def open_store(
    bootstrap: str,
    topic: str,
    path: Path,
    listener: StoreListener | None = None,
    native: bool = True,
    rocksdb: RocksDBOptions | None = None,
    client: Client = NO_CLIENT,
    timeout: float = 900,
) -> GlobalStore:
    listeners = () if listener is None else (listener,)
    config = StoreConfig(
        topic=topic,
        bootstrap_servers=bootstrap,
        path=path,
        native_restore=native,
        rocksdb=rocksdb or RocksDBOptions(),
        kafka_config=client,
    )
    return GlobalStore.from_config(config, listeners=listeners).start(timeout=timeout)


def cold_restore(
    bootstrap: str,
    topic: str,
    path: Path,
    native: bool = True,
    client: Client = NO_CLIENT,
    timeout: float = 900,
) -> tuple[float, int]:
    """(records/s from start() call to ready, records restored) into an empty directory;
    native=False restores with the Python loop instead of the C one."""
    shutil.rmtree(path, ignore_errors=True)
    counter = Counter()
    began = time.perf_counter()
    store = open_store(bootstrap, topic, path, counter, native, client=client, timeout=timeout)
    seconds = time.perf_counter() - began
    store.close()
    return counter.records / seconds, counter.records


def warm_restart(bootstrap: str, topic: str, path: Path) -> float:
    began = time.perf_counter()
    store = open_store(bootstrap, topic, path)
    seconds = time.perf_counter() - began
    store.close()
    return seconds


def gets_per_second(store: StoreReader, keys: list[str]) -> tuple[float, float]:
    """(gets per wall second, gets per second of this thread's CPU time). On a shared box
    the second shows what a get costs when it does not wait for a core."""
    get = store.get
    began, cpu = time.perf_counter(), time.thread_time()
    for k in keys:
        get(k)
    return len(keys) / (time.perf_counter() - began), len(keys) / (time.thread_time() - cpu)


def multi_get_vs_loop(store: StoreReader, keys: list[str], batch: int) -> tuple[float, float]:
    """(keys per second with get_many, keys per second with a loop of get), the same keys in
    batches of `batch`. Which of the two reads a batch first alternates batch by batch: the
    second finds the blocks the first has just put in the block cache (always letting the
    loop go second made get_many look half as fast as the loop)."""
    many = loop = 0.0
    get, get_many = store.get, store.get_many
    for n, i in enumerate(range(0, len(keys), batch)):
        chunk = keys[i : i + batch]
        for variant in ("many", "loop") if n % 2 == 0 else ("loop", "many"):
            began = time.perf_counter()
            if variant == "many":
                found = get_many(chunk)
                many += time.perf_counter() - began
            else:
                looped = [get(k) for k in chunk]
                loop += time.perf_counter() - began
        if found != {k: v for k, v in zip(chunk, looped, strict=True) if v is not None}:
            raise RuntimeError("get_many and get disagree")
    return len(keys) / many, len(keys) / loop


def scan_seconds(store: GlobalStore, expected: int) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds) of a full decoded scan."""
    began, cpu = time.perf_counter(), time.thread_time()
    n = 0
    for _ in store.items():
        n += 1
    seconds, cpu_seconds = time.perf_counter() - began, time.thread_time() - cpu
    if n != expected:
        raise RuntimeError(f"scan saw {n} keys, expected {expected}")
    return seconds, cpu_seconds


def latency_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})


def visible_by_polling(store: GlobalStore, bootstrap: str, topic: str, samples: int) -> list[float]:
    """Seconds from produce() until store.get returns the new value (polled every 0.2 ms)."""
    producer, out = latency_producer(bootstrap), []
    for i in range(samples):
        key, token = f"latency-poll-{i % 100}", uuid.uuid4().hex
        began = time.perf_counter()
        producer.produce(
            topic, key=key.encode(), value=orjson.dumps({"t": token}), headers=format_headers()
        )
        producer.poll(0)
        while (store.get(key) or {}).get("t") != token:
            time.sleep(0.0002)
            producer.poll(0)
        out.append(time.perf_counter() - began)
    producer.flush(10)
    return out


def visible_by_wait_for(
    store: GlobalStore, bootstrap: str, topic: str, samples: int
) -> list[float]:
    """Seconds from produce() until store.wait_for(the delivered offset + 1) returns."""
    producer, out = latency_producer(bootstrap), []
    delivered: list[tuple[int, int]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            raise RuntimeError(str(err))
        delivered.append((msg.partition(), msg.offset()))

    for i in range(samples):
        delivered.clear()
        began = time.perf_counter()
        producer.produce(
            topic,
            key=f"latency-wait-{i % 100}".encode(),
            value=orjson.dumps({"i": i}),
            headers=format_headers(),
            on_delivery=on_delivery,
        )
        producer.flush(10)
        p, o = delivered[0]
        if not store.wait_for({p: o + 1}, timeout=10):
            raise RuntimeError(f"offset {o} of partition {p} never became visible")
        out.append(time.perf_counter() - began)
    return out


def background_writer(bootstrap: str, topic: str, keys: int, rate: int, stop: str) -> None:
    """Runs in a child process: overwrite random existing keys at `rate` records/s until the
    file `stop` exists."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    headers, pad, rng = format_headers(), value_padding(), random.Random(7)
    began, sent = time.perf_counter(), 0
    while not os.path.exists(stop):
        for _ in range(100):
            i = rng.randrange(keys)
            producer.produce(
                topic,
                key=encode_key(key_of(i)),
                value=encode_value(value_of(i, pad)),
                headers=headers,
            )
            sent += 1
        producer.poll(0)
        ahead = sent / rate - (time.perf_counter() - began)
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(30)


def gets_under_follow(
    store: GlobalStore, bootstrap: str, topic: str, keys: int, rate: int, seconds: float
) -> tuple[list[float], float]:
    """Per-get latencies while a separate process produces `rate` rec/s, and the rate the
    follower applied meanwhile."""
    stop = Path(tempfile.mkdtemp()) / "stop"
    writer = subprocess.Popen(
        [sys.executable, __file__, "--writer", bootstrap, topic, str(keys), str(rate), str(stop)]
    )
    try:
        time.sleep(1.0)  # let the writer reach its pace
        before = sum(store.position().values())
        rng, get, out = random.Random(11), store.get, []
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            k = key_of(rng.randrange(keys))
            t0 = time.perf_counter()
            get(k)
            out.append(time.perf_counter() - t0)
            if len(out) % 64 == 0:
                time.sleep(0.001)  # a server does other work between requests, too
        applied = (sum(store.position().values()) - before) / (time.perf_counter() - began)
    finally:
        stop.touch()
        writer.wait(60)
    return out, applied


def rss_probe(bootstrap: str, topic: str, keys: int, reads: str) -> dict[str, float]:
    """Run in a fresh process: cold restore, 200k gets and a full scan; peak RSS in MB after
    each stage, the restore's records/s, the gets/s and the store's size on disk (MB) once
    closed. reads: "default", or how table files are read, "mmap" or "pread"."""
    path = Path(tempfile.mkdtemp(prefix="bench-rss-"))
    out = {"imports": peak_rss_mb()}
    rocksdb = None if reads == "default" else RocksDBOptions(mmap_reads=reads == "mmap")
    try:
        counter = Counter()
        store = open_store(bootstrap, topic, path / "s", counter, rocksdb=rocksdb)
        out["restore"] = peak_rss_mb()
        out["restore_rate"] = counter.records / counter.seconds
        rng = random.Random(3)
        keys_to_get = [key_of(rng.randrange(keys)) for _ in range(200_000)]
        out["gets_rate"] = gets_per_second(store, keys_to_get)[0]
        out["gets"] = peak_rss_mb()
        for _ in store.items():
            pass
        out["scan"] = peak_rss_mb()
        store.close()
        out["disk_mb"] = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return out


RSS_STAGES = ("imports", "restore", "gets", "scan")


def probe(bootstrap: str, topic: str, keys: int, reads: str = "default") -> dict[str, float]:
    """rss_probe in a fresh process."""
    done = subprocess.run(
        [sys.executable, __file__, "--rss-probe", bootstrap, topic, str(keys), reads],
        check=True,
        capture_output=True,
        text=True,
    )
    stages: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return stages


READS = ("pread", "mmap")  # how RocksDB reads table files (RocksDBOptions.mmap_reads)


def scaling(bootstrap: str, sizes: list[int], rounds: int) -> None:
    """Restore rate, peak RSS, gets/s and disk per key at each size, with table files read by
    pread and by mmap: one topic per size, fresh store-only process per probe, alternating
    sizes and read modes round by round; prints a table of medians."""
    topics = {}
    for keys in sizes:
        topics[keys] = f"bench-scale-{keys}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topics[keys])
        log(f"producing {keys:,} keys into {topics[keys]}")
        fill_topic(bootstrap, topics[keys], keys, "small batches")
    runs: dict[tuple[int, str], list[dict[str, float]]] = {
        (keys, reads): [] for keys in sizes for reads in READS
    }
    for r in range(rounds):
        for keys in sizes:
            for reads in READS if r % 2 == 0 else READS[::-1]:
                runs[keys, reads].append(probe(bootstrap, topics[keys], keys, reads))
                log(f"round {r + 1}, {keys:,} keys, {reads}: {runs[keys, reads][-1]}")
    print(
        "| keys | table files read by | cold restore | peak RSS after restore "
        "| after gets + scan | gets/s | disk | disk per key |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (keys, reads), probes in runs.items():
        rate, before, after, gets, disk = (
            median([p[stat] for p in probes])
            for stat in ("restore_rate", "restore", "scan", "gets_rate", "disk_mb")
        )
        print(
            f"| {keys:,} | {reads} | {rate:,.0f} rec/s | {before:,.0f} MB | {after:,.0f} MB "
            f"| {gets:,.0f} | {disk:,.0f} MB | {disk * 2**20 / keys:,.0f} B |"
        )


# -- profiling -----------------------------------------------------------------------------


@contextlib.contextmanager
def profiled_store_thread(profile: cProfile.Profile) -> Iterator[None]:
    """cProfile only sees the thread that enables it: wrap StoreThread.run (here, in the
    benchmark only) so the store's own thread is profiled."""
    original = StoreThread.run

    def run(self: StoreThread) -> None:
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    StoreThread.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        StoreThread.run = original  # type: ignore[method-assign]


def top_functions(profile: cProfile.Profile, limit: int = 14) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    # Paths relative to the checkout (and to site-packages): the docs name no machine's paths.
    shown = (_relative(line.rstrip()) for line in lines[start:] if line.strip())
    return "\n".join(shown)


def _relative(line: str) -> str:
    line = line.replace(str(ROOT) + "/", "")
    return re.sub(r"\S*/site-packages/", "", line)


def profile_paths(bootstrap: str, topic: str, workdir: Path, keys: int) -> dict[str, str]:
    restore_profile = cProfile.Profile()
    with profiled_store_thread(restore_profile):
        _, _ = cold_restore(bootstrap, topic, workdir / "profiled")
    store = open_store(bootstrap, topic, workdir / "profiled")
    get_profile = cProfile.Profile()
    rng = random.Random(5)
    sample = [key_of(rng.randrange(keys)) for _ in range(100_000)]
    get_profile.enable()
    gets_per_second(store, sample)
    get_profile.disable()
    scan_profile = cProfile.Profile()
    scan_profile.enable()
    for _ in store.items():
        pass
    scan_profile.disable()
    store.close()
    return {
        "restore (store thread, cold)": top_functions(restore_profile),
        "100k gets": top_functions(get_profile, 8),
        "full scan": top_functions(scan_profile, 8),
    }


# -- report --------------------------------------------------------------------------------


def machine(kafka_version: str) -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        found = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        cpu = found.group(1).strip() if found else cpu
    mem_gb = 0.0
    with contextlib.suppress(OSError, AttributeError):
        kb = re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text())
        mem_gb = int(kb.group(1)) / 1024 / 1024 if kb else 0.0
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {mem_gb:.1f} GiB RAM, {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}, Kafka {kafka_version}, "
        f"confluent-kafka {confluent_kafka.version()} / librdkafka "
        f"{confluent_kafka.libversion()[0]}; {datetime.date.today().isoformat()}"
    )


def table(rows: list[Row]) -> str:
    lines = ["| measure | result | target | verdict | raw |", "|---|---|---|---|---|"]
    for r in rows:
        raw = ", ".join(f"{x:,.4g}" for x in r.raw)
        lines.append(f"| {r.name} | {r.shown()} | {r.target} | {r.verdict()} | {raw} |")
    return "\n".join(lines)


RESTORE_PNG = "img/store-restore.png"
VISIBLE_PNG = "img/store-visible.png"


def draw(restores: dict[str, Restores], visible: dict[str, list[float]]) -> None:
    # Imported here: matplotlib would add ~40 MB to the RSS probe, which runs this script.
    import charts  # noqa: PLC0415

    charts.bars(
        DOCS.parent / RESTORE_PNG,
        "Cold restore, 1M records: median records/s",
        [(f"{w}: {SHORT[c]}", res.median(c)) for w, res in restores.items() for c in CONTESTANTS],
        "records per second",
        ours=[f"{w}: {SHORT[OURS]}" for w in restores],
        target=450_000,
    )
    charts.distribution(
        DOCS.parent / VISIBLE_PNG,
        "Produce → visible in a following store",
        visible,
        "milliseconds",
        scale=1000.0,
    )


def docs_section(
    rows: list[Row], about: str, setup: str, notes: list[str], profiles: dict[str, str]
) -> str:
    parts = [
        "## Store",
        "",
        f"Machine: {about}.",
        "",
        f"Command: `python benchmarks/bench_store.py {' '.join(sys.argv[1:])}`. {setup}",
        "",
        table(rows),
        "",
        f"![Cold restore against plain consume loops]({RESTORE_PNG})",
        "",
        f"![Produce to visible, cumulative distribution]({VISIBLE_PNG})",
        "",
        *[f"- {n}" for n in notes],
    ]
    if profiles:
        parts += ["", "### Where the time goes (cProfile, sorted by own time)", ""]
        for name, text in profiles.items():
            parts += [f"{name}:", "", "```", text, "```", ""]
    return "\n".join(parts).rstrip() + "\n"


def write_docs(section: str, heading: str = "## Store") -> None:
    """Replace only the `heading` section (up to the next "## " heading) of the docs file."""
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    old = pattern.search(text)
    if old:
        # A hand-written "### Findings" subsection (the analysis of a run) is kept, with
        # the hand-written subsections after it (experiments that explain the findings).
        findings = re.search(r"^### Findings\n.*\Z", old.group(0), re.S | re.M)
        if findings:
            section = section + "\n" + findings.group(0).rstrip() + "\n"
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip() + "\n\n" + section
    DOCS.write_text(text.rstrip() + "\n")


# -- main ----------------------------------------------------------------------------------


CONTESTANTS = (
    "ceiling: plain consumer, tuned",
    "plain consumer, the store's fetch settings",
    "globalstore cold restore",
    "globalstore cold restore, Python loop",
    "ktables",
    "Kafka Streams globalTable",
)
OURS = "globalstore cold restore"
SHORT = dict(zip(CONTESTANTS, ("ceiling", "store's fetch settings", "globalstore",
                               "globalstore, Python loop", "ktables", "Kafka Streams"),
                strict=True))  # fmt: skip


@dataclass
class Restores:
    """Records/s per contestant for one topic, one list entry per round; peers' peak RSS."""

    rates: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONTESTANTS})
    peer_rss: dict[str, list[float]] = field(default_factory=dict)

    def median(self, contestant: str) -> float:
        return median(self.rates[contestant])


def restore_round(
    bootstrap: str, topic: str, total: int, store_dir: Path, java: list[str], out: Restores
) -> None:
    """Each contestant once, in a fixed order, on the same topic."""
    rates = out.rates
    rates[CONTESTANTS[0]].append(ceiling(bootstrap, topic, total))
    rates[CONTESTANTS[1]].append(ceiling(bootstrap, topic, total, like_store=True))
    rate, restored = cold_restore(bootstrap, topic, store_dir)
    if restored != total:
        raise RuntimeError(f"restored {restored} records, expected {total}")
    rates[OURS].append(rate)
    python_loop = CONTESTANTS[3]
    rates[python_loop].append(cold_restore(bootstrap, topic, store_dir, native=False)[0])
    for name, peer in (
        ("ktables", peers.ktables(bootstrap, topic, total)),
        ("Kafka Streams globalTable", peers.kafka_streams(java, bootstrap, topic, total)),
    ):
        rates[name].append(peer.rate)
        out.peer_rss.setdefault(name, []).append(peer.rss_mb)


def restore_rows(writer: str, res: Restores) -> list[Row]:
    ceil, ours = res.median(CONTESTANTS[0]), res.median(OURS)
    rows = [Row(f"{writer}: {c}", res.median(c), "rec/s", raw=res.rates[c]) for c in CONTESTANTS]
    rows[2] = Row(rows[2].name, ours, "rec/s", "≥ 450,000", ours >= 450_000, res.rates[OURS])
    rows.insert(3, Row(f"{writer}: cold restore / ceiling", 100 * ours / ceil, "%", "≥ 60 %",
                       ours / ceil >= 0.6))  # fmt: skip
    for peer in ("ktables", "Kafka Streams globalTable"):
        ratio = ours / res.median(peer)
        rows.append(Row(f"{writer}: globalstore / {peer}", ratio, "x", "≥ 2", ratio >= 2))
    return rows


def run(args: argparse.Namespace, bootstrap: str, kafka_version: str, workdir: Path) -> None:
    keys, rounds = args.keys, args.rounds
    log("building the Kafka Streams peer (mvn package)")
    java = peers.build_streams_peer()
    topics = {writer: f"bench-store-{uuid.uuid4().hex[:8]}" for writer in WRITERS}
    setup = "Setup:"
    for writer, name in topics.items():
        create_topic(bootstrap, name)
        log(f"producing {keys:,} keys (~200-byte JSON values, {writer}) into {name}")
        seconds = fill_topic(bootstrap, name, keys, writer)
        setup += f" {writer}: {keys:,} records produced in {seconds:.1f}s ({WRITERS[writer]})."
    log(setup)
    topic = topics["small batches"]  # the rest of the benchmark runs on this one
    total = sum(end_offsets(bootstrap, topic).values())

    load_before = os.getloadavg()[0]
    restores = {writer: Restores() for writer in WRITERS}
    for r in range(rounds):  # alternate, so noise from neighbours hits all alike
        for writer, name in topics.items():
            restore_round(bootstrap, name, total, workdir / name, java, restores[writer])
            latest = {c: f"{v[-1]:,.0f}" for c, v in restores[writer].rates.items()}
            log(f"round {r + 1}, {writer}: {latest}")

    warm = [warm_restart(bootstrap, topic, workdir / topic) for _ in range(5)]
    log(f"warm restarts: {warm}")

    store = open_store(bootstrap, topic, workdir / topic)
    rng = random.Random(1)
    get_runs = [
        gets_per_second(store, [key_of(rng.randrange(keys)) for _ in range(200_000)])
        for _ in range(rounds)
    ]
    multi_runs = [
        multi_get_vs_loop(store, [key_of(rng.randrange(keys)) for _ in range(100_000)], MULTI_GET)
        for _ in range(rounds)
    ]
    scan_runs = [scan_seconds(store, keys) for _ in range(rounds)]
    get_rates, get_cpu_rates = [g for g, _ in get_runs], [c for _, c in get_runs]
    scans, scan_cpu = [w for w, _ in scan_runs], [c for _, c in scan_runs]
    log(f"gets (wall, cpu) {get_runs}; get_many vs loop {multi_runs}; scans {scan_runs}")
    many_rates, loop_rates = [m for m, _ in multi_runs], [lp for _, lp in multi_runs]
    polled = visible_by_polling(store, bootstrap, topic, args.samples // 2)
    waited = visible_by_wait_for(store, bootstrap, topic, args.samples)
    log(
        f"produce->visible p99: polled {quantile(polled, 0.99) * 1000:.1f} ms, "
        f"wait_for {quantile(waited, 0.99) * 1000:.1f} ms"
    )
    under, applied = gets_under_follow(store, bootstrap, topic, keys, args.rate, 10.0)
    log(f"gets under follow: {len(under):,} gets, follower applied {applied:,.0f} rec/s")
    store.close()

    stages = probe(bootstrap, topic, keys)
    rss = stages["scan"]
    log(f"peak RSS of the store-only process after each stage (MB): {stages}")
    main_rss = peak_rss_mb()

    setup += (
        f" Load average (1 min) {load_before:.1f} before the measurements and "
        f"{os.getloadavg()[0]:.1f} after them, on {os.cpu_count()} CPUs."
    )
    ms = 1000.0
    # The workload of the read rows: the block cache holds about a quarter of the values.
    cache_mb = RocksDBOptions().block_cache_size >> 20
    reads = f"random of {keys:,} keys, ~200 B values, {cache_mb} MB block cache empty at open"
    rows = [
        *[row for writer, res in restores.items() for row in restore_rows(writer, res)],
        *[
            Row(f"peak RSS, {peer} process ({writer})", median(mb), "MB", raw=mb)
            for writer, res in restores.items()
            for peer, mb in res.peer_rss.items()
        ],
        Row("warm restart, nothing new", median(warm), "s", "< 0.1 s", median(warm) < 0.1, warm),
        Row(
            f"point gets, 1 thread: {reads}",
            median(get_rates),
            "ops/s",
            "≥ 150,000",
            median(get_rates) >= 150_000,
            get_rates,
        ),
        Row("same gets per thread-CPU second", median(get_cpu_rates), "ops/s", raw=get_cpu_rates),
        Row(
            f"get_many, {MULTI_GET} keys per call: {reads}",
            median(many_rates),
            "keys/s",
            raw=many_rates,
        ),
        Row("same keys, a loop of get", median(loop_rates), "keys/s", raw=loop_rates),
        Row(
            "get_many / loop of get (which reads a batch first alternates)",
            100 * median(many_rates) / median(loop_rates),
            "%",
            raw=[100 * m / lp for m, lp in multi_runs],
        ),
        Row(
            f"full decoded scan of {keys:,}", median(scans), "s", "< 2 s", median(scans) < 2, scans
        ),
        Row("same scan, thread-CPU seconds", median(scan_cpu), "s", raw=scan_cpu),
        Row("produce→visible p50 (wait_for)", quantile(waited, 0.5) * ms, "ms"),
        Row(
            "produce→visible p99 (wait_for)",
            quantile(waited, 0.99) * ms,
            "ms",
            "< 10 ms",
            quantile(waited, 0.99) * ms < 10,
        ),
        Row("produce→visible p50 (get polling)", quantile(polled, 0.5) * ms, "ms"),
        Row("produce→visible p99 (get polling)", quantile(polled, 0.99) * ms, "ms"),
        Row(f"get p50 while following {args.rate:,} rec/s", quantile(under, 0.5) * ms, "ms"),
        Row(
            f"get p99 while following {args.rate:,} rec/s",
            quantile(under, 0.99) * ms,
            "ms",
            "< 10 ms",
            quantile(under, 0.99) * ms < 10,
        ),
        Row("peak RSS, store-only process", rss, "MB", "≤ 300 MB", rss <= 300),
        Row("peak RSS, this benchmark process", main_rss, "MB"),
    ]
    notes = [
        f"Medians of {rounds} rounds; in each round every contestant restores each topic once, "
        "in the order of the table. Restore rate = records / time from start to ready "
        "(connect and plan included; a bulk restore counts its keys after ready, in the "
        "background). The rest of the table runs on the small-batch topic.",
        "Ceiling: a plain confluent-kafka consumer that assigns all partitions and counts "
        "consume(10000, 50 ms) batches without touching the messages, with librdkafka's default "
        "fetch settings plus fetch.queue.backoff.ms=10 (the fastest loop found; the default "
        "1 s backoff idles it). The next row is the same loop with the store's own settings.",
        "globalstore cold restore: the default store, whose bulk restore runs the C loop "
        "(docs/store.md); the Python-loop row is the same store with native_restore=False.",
        "Peers, each in a fresh process on the same topic: ktables 2.0.0 (aiokafka into a dict, "
        "values kept as bytes: no decoding) and Kafka Streams 4.1.1 `globalTable` into RocksDB "
        "(benchmarks/streams-peer, default settings, read_committed, start() to RUNNING).",
        f"produce→visible: {len(waited)} samples of produce + delivery report + "
        f"store.wait_for(offset + 1); {len(polled)} samples of produce then store.get polled "
        "every 0.2 ms until the new value shows. Producer linger.ms=0, acks=all.",
        f"Gets under follow: a separate process overwrites random keys at {args.rate:,} rec/s; "
        f"the follower applied {applied:,.0f} rec/s during the {len(under):,} timed gets.",
        f"Reads: {rounds} rounds of 200k point gets, then {rounds} of 100k keys read both "
        f"by get_many ({MULTI_GET} a call) and by a loop of get, keys drawn at random from "
        f"all {keys:,} in a store just opened. Its block cache starts empty and holds about "
        "a quarter of the uncompressed values, so most reads decompress a block read from a "
        "table file (page-cached); which of get_many and the loop reads a batch first "
        "alternates, as the second finds its blocks cached. benchmarks/bench_reads.py takes "
        "these reads apart (docs/performance.md, Point reads).",
        "Thread-CPU rows (information): the same get loop and scan timed with "
        "time.thread_time(), i.e. without the time the thread waited for a core on a shared "
        "machine; wall time is what the targets are about.",
        "Peak RSS (VmHWM; ru_maxrss would carry the parent's peak across fork + exec) of a "
        "fresh process that only cold-restores, does 200k gets and a full scan: Python, "
        "librdkafka's fetch queue, RocksDB memtables and block cache. Peak after each stage "
        f"(MB): {', '.join(f'{k} {stages[k]:,.0f}' for k in RSS_STAGES)}; its restore ran at "
        f"{stages['restore_rate']:,.0f} rec/s and left {stages['disk_mb']:,.0f} MB on disk. "
        "The benchmark process's own figure also holds its producer queue and consumers.",
    ]
    profiles = profile_paths(bootstrap, topic, workdir, keys) if args.profile else {}
    about = machine(kafka_version)
    print()
    print(about)
    print(setup)
    print(table(rows))
    for name, text in profiles.items():
        print(f"\n{name}:\n{text}")
    if args.write_docs:
        draw(restores, {"wait_for": waited, "get polling": polled})
        write_docs(docs_section(rows, about, setup, notes, profiles))
        log(f"wrote the Store section of {DOCS} and its pictures")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        bootstrap, topic, keys, rate, stop = sys.argv[2:7]
        background_writer(bootstrap, topic, int(keys), int(rate), stop)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--rss-probe":
        print(json.dumps(rss_probe(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--bootstrap-servers", help="Use this broker instead of a fresh one.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000, help="produce→visible samples")
    parser.add_argument("--rate", type=int, default=10_000, help="rec/s while timing gets")
    parser.add_argument("--profile", action="store_true", help="cProfile restore/get/scan")
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS}")
    parser.add_argument(
        "--scaling",
        metavar="KEYS,KEYS,...",
        help="instead of the rest: restore rate, peak RSS and disk per key at these sizes",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        workdir = Path(tmp)
        if args.bootstrap_servers:
            measure(args, args.bootstrap_servers, "(existing cluster)", workdir)
            return
        broker = LocalKafka(port=free_port(), data_dir=workdir / "kafka", heap="1g")
        log("starting a local Kafka broker")
        with broker:
            measure(args, broker.bootstrap, broker.status().version, workdir)


def measure(args: argparse.Namespace, bootstrap: str, kafka_version: str, workdir: Path) -> None:
    if args.scaling:
        scaling(bootstrap, [int(n) for n in args.scaling.split(",")], args.rounds)
    else:
        run(args, bootstrap, kafka_version, workdir)


if __name__ == "__main__":
    main()
