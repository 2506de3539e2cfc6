"""Scale benchmark: how a store behaves as the topic grows, and as instances multiply.

    python benchmarks/bench_scale.py --sizes 100000,1000000 --rounds 1 --quick   # a check
    python benchmarks/bench_scale.py --sizes 1000000,10000000,50000000 --write-docs
    python benchmarks/bench_scale.py --instances 1,5,10,20 --keys 1000000 --write-docs

It is a script, not a test: it prints what it measured with PASS/MISS per target and, with
--write-docs, replaces its own sections of benchmarks/results/latest.md ("## Scale: sizes",
"## Scale: instances") and draws their pictures. Every store runs in a fresh process of its
own (this script with --step), so each peak RSS is that process's VmHWM.

--sizes, per size (one topic of that many keys, ~250-byte JSON values, deleted afterwards):
cold restore (records/s, peak RSS, disk per key); a restart with the OS page cache dropped
(when this process may: root), time from process start to the first answered get, then
`get` p50/p99 on random keys over the whole key space; a full scan; a new instance booting
from a fresh serving peer's (`globalstore serve`) first snapshot, that peer streaming
/v1/snapshot to a reader that discards it, and a boot from a later send (the table files'
digests known), each boot against the replay. Then peak RSS with 3,000 values of 900 KB.

--instances, per count N on one topic of --keys: N cold restores at the same moment against
one alone; N instances following while a writer overwrites keys (broker CPU, produce→visible
p99 per instance); N instances booting at once from one serving peer's snapshot (time until
the last is ready, GET p99 on the peer meanwhile).

Broker CPU is the broker process's utime + stime from /proc (a local broker's pid, or the
process listening on the --bootstrap-servers port: it must run on this machine).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from bench_serve import boot_seconds, serve, snapshot_stream
from bench_shape import order
from bench_store import (
    cold_restore,
    create_topic,
    fill_topic,
    key_of,
    latency_producer,
    log,
    machine,
    median,
    open_store,
    quantile,
    scan_seconds,
    write_docs,
)
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from loadgen import run_load
from peers import peak_rss_mb

from globalstore import StoreListener
from globalstore.codec import format_headers
from globalstore.localkafka import LocalKafka, free_port

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "benchmarks" / "results" / "latest.md"
STEP_TIMEOUT_S = 4 * 3600.0  # a 50M restore on a shared box: generous, never endless
START_TIMEOUT_S = 3 * 3600.0  # start() of one store, within its step
VALUE_BYTES = 250  # bench_shape.order: an order of 10 fields
LARGE_VALUES, LARGE_VALUE_BYTES = 3_000, 900_000
UNCACHED_GETS = 20_000
RSS_TARGET_MB = 300.0
GET_P99_TARGET_MS = 1.0
PEER_GET_P99_TARGET_MS = 20.0


# -- the steps, each in a fresh process -----------------------------------------------------


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def step_restore(bootstrap: str, topic: str, path: str) -> dict[str, float]:
    """Cold restore into an empty directory (kept for the next steps)."""
    rate, records = cold_restore(bootstrap, topic, Path(path), timeout=START_TIMEOUT_S)
    return {
        "rate": rate,
        "records": records,
        "seconds": records / rate,
        "rss_mb": peak_rss_mb(),
        "disk_mb": disk_mb(Path(path)),
    }


def step_restart(
    bootstrap: str, topic: str, path: str, keys: int, gets: int, launched: float
) -> dict[str, float]:
    """A restart of a restored store: seconds from this process's launch (`launched`, wall
    clock, taken by the parent just before it) to the first answered get, then per-get
    latencies on random keys of the whole key space."""
    rng = random.Random()
    store = open_store(bootstrap, topic, Path(path), timeout=START_TIMEOUT_S)
    while store.get(key_of(rng.randrange(keys))) is None:
        pass  # every key exists: only a wrong topic would loop here
    first = time.time() - launched
    get, timings = store.get, []
    for k in [key_of(rng.randrange(keys)) for _ in range(gets)]:
        began = time.perf_counter()
        get(k)
        timings.append(time.perf_counter() - began)
    store.close()
    return {
        "first_answer_s": first,
        "p50_ms": quantile(timings, 0.5) * 1000,
        "p99_ms": quantile(timings, 0.99) * 1000,
        "rss_mb": peak_rss_mb(),
    }


def step_scan(bootstrap: str, topic: str, path: str, keys: int) -> dict[str, float]:
    store = open_store(bootstrap, topic, Path(path), timeout=START_TIMEOUT_S)
    seconds, _ = scan_seconds(store, keys)
    store.close()
    return {"rate": keys / seconds, "rss_mb": peak_rss_mb()}


class _Installs(logging.Handler):
    """Counts the snapshot module's "installed snapshot" lines: a boot that could not get
    the snapshot (a 503 from a busy peer, say) silently restores from Kafka instead."""

    def __init__(self) -> None:
        super().__init__()
        self.installed = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.installed += record.getMessage().startswith("installed snapshot")


def step_boot(bootstrap: str, topic: str, path: str, url: str) -> dict[str, float]:
    """A new instance on an empty directory from a peer's snapshot, start() to ready."""
    installs = _Installs()
    logger = logging.getLogger("globalstore.snapshots.archive")
    logger.addHandler(installs)
    logger.setLevel(logging.INFO)
    began = time.time()
    seconds = boot_seconds(bootstrap, topic, Path(path), url, START_TIMEOUT_S)
    shutil.rmtree(path, ignore_errors=True)
    return {
        "seconds": seconds,
        "ready_at": began + seconds,
        "installed": installs.installed,
        "rss_mb": peak_rss_mb(),
    }


class _ProbeTimes(StoreListener):
    """Produce→visible of probe keys, whose name carries their send time (ns, wall clock)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_changes(self, topic: str, upserted: Sequence[str], deleted: Sequence[str]) -> None:
        now = time.time_ns()
        for key in upserted:
            if key.startswith("probe-"):
                self.seconds.append((now - int(key[6:])) / 1e9)


def step_follow(bootstrap: str, topic: str, path: str, stop: str) -> dict[str, float]:
    """Follow the topic until the file `stop` exists; produce→visible of the probes."""
    probes = _ProbeTimes()
    store = open_store(bootstrap, topic, Path(path), probes, timeout=START_TIMEOUT_S)
    print("ready", flush=True)
    while not os.path.exists(stop):
        time.sleep(0.1)
    store.close()
    xs = probes.seconds or [float("nan")]
    return {
        "probes": len(probes.seconds),
        "p50_ms": quantile(xs, 0.5) * 1000,
        "p99_ms": quantile(xs, 0.99) * 1000,
        "rss_mb": peak_rss_mb(),
    }


STEPS: dict[str, Callable[..., dict[str, float]]] = {
    "restore": step_restore,
    "restart": step_restart,
    "scan": step_scan,
    "boot": step_boot,
    "follow": step_follow,
}


def launch(step: str, *args: object) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--step", step, json.dumps(args)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def result_of(proc: subprocess.Popen[str], what: str) -> dict[str, float] | None:
    """The step's JSON line, or None (logged) when it failed or ran out of time: one failed
    step must not cost the rest of a run that took hours to set up."""
    try:
        out, _ = proc.communicate(timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        log(f"FAILED {what}: no answer within {STEP_TIMEOUT_S:g}s")
        return None
    if proc.returncode != 0:
        log(f"FAILED {what}: exit code {proc.returncode}")
        return None
    found: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return found


def run_step(step: str, *args: object) -> dict[str, float] | None:
    began = time.perf_counter()
    found = result_of(launch(step, *args), step)
    if found is not None:
        log(f"{step} ({time.perf_counter() - began:.1f}s): {found}")
    return found


# -- machine -------------------------------------------------------------------------------


def drop_page_cache() -> bool:
    """Drop the OS page cache (root only), so the next reads come from the disk."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def listening_pid(port: int) -> int | None:
    """The process with a socket listening on `port` (the broker, when it runs here)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                return int(fd_dir.parent.name)
    return None


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process, in seconds (nan when unknown)."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def broker_cpu(pid: int | None) -> Iterator[list[float]]:
    """Yields a list that holds, once the block ends, the broker's CPU use in % of one core."""
    out: list[float] = []
    cpu, began = cpu_seconds(pid), time.perf_counter()
    yield out
    out.append(100 * (cpu_seconds(pid) - cpu) / (time.perf_counter() - began))


@contextlib.contextmanager
def peer(bootstrap: str, topic: str, path: Path, max_snapshots: int) -> Iterator[str]:
    """`globalstore serve` on a restored store; yields its snapshot URL."""
    port = free_port()
    proc = serve(bootstrap, topic, path, port, ["--max-snapshots", str(max_snapshots)])
    try:
        yield f"http://127.0.0.1:{port}/v1/snapshot"
    finally:
        proc.terminate()
        proc.wait(120)


def delete_topic(bootstrap: str, topic: str) -> None:
    """Free the broker's disk before the next (larger) topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer
    try:
        admin.delete_topics([topic])[topic].result(60)
    except KafkaException as exc:
        log(f"could not delete {topic}: {exc}")


def fill(bootstrap: str, topic: str, keys: int, make: Callable[[int], Any]) -> float:
    create_topic(bootstrap, topic)
    log(f"producing {keys:,} keys into {topic}")
    seconds = fill_topic(bootstrap, topic, keys, "small batches", make)
    log(f"produced {keys:,} keys in {seconds:.1f}s")
    return seconds


def large_value(i: int) -> dict[str, Any]:
    # Random text: lz4 would shrink a repeated character to nothing on the broker.
    return {"i": i, "blob": os.urandom(LARGE_VALUE_BYTES // 2).hex()}


# -- sizes ---------------------------------------------------------------------------------


@dataclass
class SizeRun:
    keys: int
    fill_s: float
    steps: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    snapshot: list[tuple[float, float, int]] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)
    dropped: bool = False  # the OS page cache was dropped before each restart

    def add(self, step: str, found: dict[str, float] | None) -> None:
        if found is not None:
            self.steps.setdefault(step, []).append(found)

    def med(self, step: str, stat: str) -> float:
        found = [s[stat] for s in self.steps.get(step, [])]
        return median(found) if found else float("nan")


@contextlib.contextmanager
def timed(run: SizeRun, what: str) -> Iterator[None]:
    began = time.perf_counter()
    yield
    run.step_seconds[what] = run.step_seconds.get(what, 0.0) + time.perf_counter() - began


def measure_size(bootstrap: str, keys: int, args: argparse.Namespace, work: Path) -> SizeRun:
    topic = f"bench-scale-{keys}-{uuid.uuid4().hex[:6]}"
    run = SizeRun(keys, fill(bootstrap, topic, keys, order))
    store, new = work / f"store-{keys}", work / f"new-{keys}"
    try:
        for r in range(args.rounds):
            log(f"{keys:,} keys, round {r + 1} of {args.rounds}")
            with timed(run, "cold restore"):
                run.add("restore", run_step("restore", bootstrap, topic, str(store)))
            with timed(run, "restart + gets"):
                run.dropped = drop_page_cache()
                restart = run_step(
                    "restart", bootstrap, topic, str(store), keys, UNCACHED_GETS, time.time()
                )
                run.add("restart", restart)
            with timed(run, "scan"):
                run.add("scan", run_step("scan", bootstrap, topic, str(store), keys))
            with timed(run, "snapshot stream + boot"):
                snapshot_round(run, bootstrap, topic, store, new, args.max_snapshots)
    finally:
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(new, ignore_errors=True)
        delete_topic(bootstrap, topic)
    return run


def snapshot_round(
    run: SizeRun, bootstrap: str, topic: str, store: Path, new: Path, max_snapshots: int
) -> None:
    """A fresh peer: a boot from its first send (it hashes every file), the stream read and
    discarded, then a boot from a later send (the digests of its table files known)."""
    try:
        with peer(bootstrap, topic, store, max_snapshots) as url:
            run.add("first boot", run_step("boot", bootstrap, topic, str(new), url))
            port = int(url.split(":")[2].split("/")[0])
            run.snapshot.append(snapshot_stream(port))
            log(f"snapshot: first byte, all, bytes {run.snapshot[-1]}")
            run.add("boot", run_step("boot", bootstrap, topic, str(new), url))
    except Exception as exc:  # the other measures of this size still count
        log(f"FAILED snapshot round: {type(exc).__name__}: {exc}")


def large_values_rss(bootstrap: str, work: Path) -> dict[str, float] | None:
    topic = f"bench-scale-large-{uuid.uuid4().hex[:6]}"
    try:
        fill(bootstrap, topic, LARGE_VALUES, large_value)
        return run_step("restore", bootstrap, topic, str(work / "large"))
    except Exception as exc:  # the sizes measured so far still get reported
        log(f"FAILED large values: {type(exc).__name__}: {exc}")
        return None
    finally:
        shutil.rmtree(work / "large", ignore_errors=True)
        delete_topic(bootstrap, topic)


def size_rows(runs: list[SizeRun]) -> list[tuple[str, ...]]:
    """(measure, one cell per size, target, verdict) rows."""
    rows: list[tuple[str, ...]] = []

    def row(name: str, cells: list[str], target: str = "", ok: bool | None = None) -> None:
        rows.append((name, *cells, target, "" if ok is None else ("PASS" if ok else "MISS")))

    rates = [r.med("restore", "rate") for r in runs]
    ratio = rates[-1] / rates[0]
    row(
        "cold restore, records/s",
        [f"{x:,.0f}" for x in rates],
        f"largest ≥ 80 % of smallest ({ratio:.0%})",
        ratio >= 0.8,
    )
    peak = [
        max([s["rss_mb"] for ss in r.steps.values() for s in ss] or [float("nan")]) for r in runs
    ]
    row(
        "peak RSS of any step, MB",
        [f"{x:,.0f}" for x in peak],
        "≤ 300 MB",
        all(x <= RSS_TARGET_MB for x in peak),
    )
    row("peak RSS of the cold restore, MB", [f"{r.med('restore', 'rss_mb'):,.0f}" for r in runs])
    row(
        "disk per key, bytes",
        [f"{r.med('restore', 'disk_mb') * 2**20 / r.keys:,.0f}" for r in runs],
    )
    row("disk, MB", [f"{r.med('restore', 'disk_mb'):,.0f}" for r in runs])
    row(
        "snapshot size, MB",
        [
            f"{median([s[2] for s in r.snapshot]) / 2**20:,.0f}" if r.snapshot else "failed"
            for r in runs
        ],
    )
    row(
        "snapshot: checkpoint (first byte), s",
        [f"{median([s[0] for s in r.snapshot]):,.2f}" if r.snapshot else "failed" for r in runs],
    )
    row(
        "snapshot: whole stream (a later send), s",
        [f"{median([s[1] for s in r.snapshot]):,.1f}" if r.snapshot else "failed" for r in runs],
    )
    replay = [r.med("restore", "seconds") for r in runs]
    row("replay (cold restore), s", [f"{x:,.1f}" for x in replay])
    for step, which in (("first boot", "the peer's first send"), ("boot", "a later send")):
        boot = [r.med(step, "seconds") for r in runs]
        row(f"boot from {which}, s", [f"{x:,.1f}" for x in boot])
        speedup = [a / b for a, b in zip(replay, boot, strict=True)]
        row(
            f"replay / boot from {which}",
            [f"{x:,.1f}x" for x in speedup],
            "≥ 10x at the largest",
            speedup[-1] >= 10,
        )
    p99 = [r.med("restart", "p99_ms") for r in runs]
    row("get p50, ms", [f"{r.med('restart', 'p50_ms'):,.3f}" for r in runs])
    row(
        "get p99, ms",
        [f"{x:,.3f}" for x in p99],
        "< 1 ms at the largest",
        p99[-1] < GET_P99_TARGET_MS,
    )
    row("full scan, keys/s", [f"{r.med('scan', 'rate'):,.0f}" for r in runs])
    row(
        "time to first answer after a restart, s",
        [f"{r.med('restart', 'first_answer_s'):,.2f}" for r in runs],
    )
    return rows


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


SIZE_PICTURES: dict[str, tuple[str, str, dict[str, tuple[str, str]], float | None]] = {
    # file: (title, unit, {series: (step, stat)}, target)
    "restore": (
        "Cold restore rate by topic size",
        "records/s",
        {"cold restore": ("restore", "rate")},
        None,
    ),
    "rss": (
        "Peak RSS by topic size, each step in a fresh process",
        "MB",
        {
            "cold restore": ("restore", "rss_mb"),
            "restart + gets": ("restart", "rss_mb"),
            "scan": ("scan", "rss_mb"),
        },
        RSS_TARGET_MB,
    ),
    "disk": ("Disk per key by topic size", "bytes", {"disk per key": ("restore", "disk_b")}, None),
    "boot": (
        "New instance: replay against a boot from a peer's snapshot",
        "seconds",
        {
            "replay (cold restore)": ("restore", "seconds"),
            "boot, the peer's first send": ("first boot", "seconds"),
            "boot, a later send": ("boot", "seconds"),
        },
        None,
    ),
    "get": (
        "get latency on random keys after a restart",
        "ms",
        {"p99": ("restart", "p99_ms"), "p50": ("restart", "p50_ms")},
        GET_P99_TARGET_MS,
    ),
    "scan": ("Full scan rate by topic size", "keys/s", {"scan": ("scan", "rate")}, None),
    "first-answer": (
        "Restart: process start to first answered get",
        "seconds",
        {"first answer": ("restart", "first_answer_s")},
        None,
    ),
}


def draw_sizes(runs: list[SizeRun]) -> list[tuple[str, str]]:
    """The log-log pictures; returns their (path relative to docs/, title)."""
    import charts  # noqa: PLC0415 - matplotlib only in the parent, never in a step

    for r in runs:  # derived stats the table computes on the fly
        for s in r.steps.get("restore", []):
            s["disk_b"] = s["disk_mb"] * 2**20 / r.keys
    xs = [r.keys for r in runs]
    names = []
    for name, (title, unit, series, target) in SIZE_PICTURES.items():
        ys = {label: [r.med(step, stat) for r in runs] for label, (step, stat) in series.items()}
        names.append((f"img/scale-{name}.png", title))
        charts.loglog(DOCS.parent / names[-1][0], title, xs, ys, unit, target)
    snap = {
        "size, MB": [
            median([s[2] for s in r.snapshot]) / 2**20 if r.snapshot else float("nan") for r in runs
        ],
        "stream, s": [
            median([s[1] for s in r.snapshot]) if r.snapshot else float("nan") for r in runs
        ],
    }
    names.append(("img/scale-snapshot.png", "Snapshot size and time to stream it"))
    charts.loglog(DOCS.parent / names[-1][0], names[-1][1], xs, snap, "MB / seconds")
    return names


def sizes(args: argparse.Namespace, bootstrap: str, work: Path) -> str:
    runs = []
    for keys in [int(n) for n in args.sizes.split(",")]:
        try:
            runs.append(measure_size(bootstrap, keys, args, work))
        except Exception as exc:  # a size that failed (filling its topic, say): go on
            log(f"FAILED {keys:,} keys: {type(exc).__name__}: {exc}")
            continue
        log(f"{keys:,} keys: seconds per step {runs[-1].step_seconds}")
    if not runs:
        raise RuntimeError("no size could be measured")
    large = None if args.quick else large_values_rss(bootstrap, work)
    header = ["measure", *[f"{r.keys:,} keys" for r in runs], "target", "verdict"]
    text = markdown(header, size_rows(runs))
    dropped = "after dropping" if runs[0].dropped else "without dropping (not root)"
    notes = [
        f"Medians of {args.rounds} rounds; values ~{VALUE_BYTES} bytes of JSON, 6 partitions, "
        "produced with small batches (lz4): "
        + ", ".join(f"{r.keys:,} in {r.fill_s:,.0f}s" for r in runs)
        + ".",
        "Every store step runs in a fresh process; peak RSS is its VmHWM. Seconds per step at "
        "each size (all rounds): "
        + "; ".join(
            f"{r.keys:,}: " + ", ".join(f"{k} {v:,.0f}s" for k, v in r.step_seconds.items())
            for r in runs
        )
        + ".",
        f"Restart: a warm store opened in a new process ({dropped} the OS page cache); "
        "first answer = process launch to the first get answered; then "
        f"{UNCACHED_GETS:,} gets of random keys over the whole key space, timed one by one, "
        "default 64 MB block cache.",
        f"Snapshot: `globalstore serve --max-snapshots {args.max_snapshots}` on the restored "
        "store, a fresh one each round; a boot is a GlobalStore with bootstrap_from=that URL "
        "on an empty directory, start() to ready: first from the peer's first send (it hashes "
        "every file), then GET /v1/snapshot read and discarded (the stream rows), then a boot "
        "from that later send (the peer knows its table files' digests); replay is the cold "
        "restore above.",
    ]
    if large is not None:
        rss = large["rss_mb"]
        notes.append(
            f"Large values: peak RSS of the cold restore of {LARGE_VALUES:,} values of "
            f"~{LARGE_VALUE_BYTES // 1000} KB (random hex) {rss:,.0f} MB, target ≤ 300 MB: "
            f"{'PASS' if rss <= RSS_TARGET_MB else 'MISS'}; it restored "
            f"{large['rate']:,.0f} records/s."
        )
    print(text)
    pictures = draw_sizes(runs) if args.write_docs else []
    return "\n".join(
        [text, "", *[f"- {n}" for n in notes], "", *[f"![{t}]({p})\n" for p, t in pictures]]
    ).rstrip()


# -- instances -----------------------------------------------------------------------------


@dataclass
class CountRun:
    n: int
    restores: list[dict[str, float]] = field(default_factory=list)
    restore_wall_s: float = float("nan")
    restore_cpu: list[float] = field(default_factory=list)  # broker, % of one core
    follows: list[dict[str, float]] = field(default_factory=list)
    follow_cpu: list[float] = field(default_factory=list)
    boots: list[dict[str, float]] = field(default_factory=list)
    last_ready_s: float = float("nan")
    boot_cpu: list[float] = field(default_factory=list)
    peer_gets: list[float] = field(default_factory=list)  # seconds per GET on the peer


def all_at_once(step: str, argsets: list[tuple[object, ...]]) -> list[dict[str, float]]:
    """Start every step process at the same moment; the results of those that succeeded."""
    procs = [launch(step, *a) for a in argsets]
    found = [result_of(p, f"{step} {i + 1} of {len(procs)}") for i, p in enumerate(procs)]
    return [f for f in found if f is not None]


def restores_at_once(
    run: CountRun,
    bootstrap: str,
    topic: str,
    work: Path,
    pid: int | None,
    args: argparse.Namespace,
) -> None:
    """N cold restores of the topic starting at the same moment, each into its directory."""
    began = time.perf_counter()
    with broker_cpu(pid) as cpu:
        run.restores = all_at_once(
            "restore", [(bootstrap, topic, str(work / f"inst-{i}")) for i in range(run.n)]
        )
    run.restore_wall_s, run.restore_cpu = time.perf_counter() - began, cpu
    log(
        f"{run.n} cold restores at once: {[round(r['rate']) for r in run.restores]} rec/s, "
        f"broker CPU {cpu[0]:.0f} %"
    )


def follow_under_writes(
    run: CountRun,
    bootstrap: str,
    topic: str,
    work: Path,
    pid: int | None,
    args: argparse.Namespace,
) -> None:
    """N instances follow while a writer overwrites keys at --rate records/s and this process
    sends 50 probes/s; each instance times its probes."""
    stops = Path(tempfile.mkdtemp(dir=work))
    procs = [
        launch("follow", bootstrap, topic, str(work / f"inst-{i}"), str(stops / "follow"))
        for i in range(run.n)
    ]
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready", or "" when it failed (result_of says so)
    import bench_store  # noqa: PLC0415 - its --writer mode, as a process of its own

    writer = subprocess.Popen(
        [
            sys.executable,
            bench_store.__file__,
            "--writer",
            bootstrap,
            topic,
            str(args.keys),
            str(args.rate),
            str(stops / "writer"),
        ]
    )
    producer = latency_producer(bootstrap)
    # Right after a cold restore (and a fill) the first seconds of following are slow: p99
    # 100+ ms against 6-8 ms a minute later. Measure the steady state: warm-up probes first.
    send_probes(producer, topic, "warmup-", args.warmup)
    with broker_cpu(pid) as cpu:
        send_probes(producer, topic, "probe-", args.seconds)
    producer.flush(30)
    (stops / "writer").touch()
    writer.wait(120)
    time.sleep(2.0)  # the last probes reach every instance
    (stops / "follow").touch()
    run.follows = [f for i, p in enumerate(procs) if (f := result_of(p, f"follow {i + 1}"))]
    run.follow_cpu = cpu
    log(
        f"{run.n} following: p99 {[round(f['p99_ms'], 1) for f in run.follows]} ms, "
        f"broker CPU {cpu[0]:.0f} %"
    )


def send_probes(producer: Producer, topic: str, prefix: str, seconds: float) -> None:
    """50 records/s for `seconds`, each key `prefix` + the send time in ns."""
    headers, until = format_headers(), time.perf_counter() + seconds
    while time.perf_counter() < until:
        key = f"{prefix}{time.time_ns()}".encode()
        producer.produce(topic, key=key, value=orjson.dumps({"probe": True}), headers=headers)
        producer.poll(0)
        time.sleep(0.02)


def gets_meanwhile(port: int, keys: int, stop: threading.Event, out: list[float]) -> None:
    """GET random keys from the peer, one at a time, until `stop`: its latencies into `out`."""
    rng = random.Random(5)
    paths = [f"/v1/keys/{key_of(rng.randrange(keys))}" for _ in range(10_000)]
    while not stop.is_set():
        result = run_load("127.0.0.1", port, paths, connections=1, seconds=1.0)
        out += result.latencies


def fan_out(
    run: CountRun,
    bootstrap: str,
    topic: str,
    work: Path,
    pid: int | None,
    args: argparse.Namespace,
) -> None:
    """N instances boot at once from one serving peer's snapshot while GETs hit the peer."""
    with peer(bootstrap, topic, work / "inst-0", args.max_snapshots) as url:
        port = int(url.split(":")[2].split("/")[0])
        stop = threading.Event()
        gets = threading.Thread(target=gets_meanwhile, args=(port, args.keys, stop, run.peer_gets))
        gets.start()
        began = time.time()
        try:
            with broker_cpu(pid) as cpu:
                run.boots = all_at_once(
                    "boot", [(bootstrap, topic, str(work / f"boot-{i}"), url) for i in range(run.n)]
                )
        finally:
            stop.set()
            gets.join()
    run.boot_cpu = cpu
    if run.boots:
        run.last_ready_s = max(b["ready_at"] for b in run.boots) - began
    log(
        f"{run.n} booting from one peer: last ready after {run.last_ready_s:.1f}s, "
        f"{sum(b['installed'] for b in run.boots):.0f} from the snapshot, peer GET p99 "
        f"{quantile(run.peer_gets or [float('nan')], 0.99) * 1000:.1f} ms"
    )


def measure_count(
    n: int, bootstrap: str, topic: str, work: Path, pid: int | None, args: argparse.Namespace
) -> CountRun:
    run = CountRun(n)
    try:
        phases = (
            ("cold restores at once", restores_at_once),
            ("follow", follow_under_writes),
            ("fan-out", fan_out),
        )
        for what, phase in phases:
            began = time.perf_counter()
            try:
                phase(run, bootstrap, topic, work, pid, args)
            except Exception as exc:  # the other phases and counts still run
                log(f"FAILED {what} with {n} instances: {type(exc).__name__}: {exc}")
            log(f"{n} instances, {what}: {time.perf_counter() - began:.0f}s")
    finally:
        for leftover in work.glob("inst-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        for leftover in work.glob("boot-*"):
            shutil.rmtree(leftover, ignore_errors=True)
    return run


def cells(xs: Sequence[float], fmt: str) -> str:
    """min / median / max of per-instance figures."""
    if not xs:
        return "failed"
    return " / ".join(format(x, fmt) for x in (min(xs), median(list(xs)), max(xs)))


def instance_rows(runs: list[CountRun]) -> list[tuple[str, ...]]:
    alone = median([r["rate"] for r in runs[0].restores]) if runs[0].restores else float("nan")
    rows: list[tuple[str, ...]] = []
    for run in runs:
        rates = [r["rate"] for r in run.restores]
        worst = min(rates) / alone if rates else float("nan")
        p99s = [f["p99_ms"] for f in run.follows]
        installed = sum(b["installed"] for b in run.boots)
        peer_p99 = quantile(run.peer_gets, 0.99) * 1000 if run.peer_gets else float("nan")
        rows.append(
            (
                f"{run.n}",
                cells(rates, ",.0f") + f" ({worst:.0%} of one alone)",
                f"{run.restore_cpu[0]:.0f} %" if run.restore_cpu else "",
                cells(p99s, ".1f"),
                f"{run.follow_cpu[0]:.0f} %" if run.follow_cpu else "",
                f"{run.last_ready_s:.1f} s ({installed:.0f} of {run.n} from the snapshot)",
                f"{peer_p99:.1f} ms ({len(run.peer_gets):,} GETs)",
                f"{run.boot_cpu[0]:.0f} %" if run.boot_cpu else "",
            )
        )
    return rows


INSTANCE_HEADER = (
    "instances",
    "cold restores at once: rec/s per instance, min / median / max",
    "broker CPU",
    "following: produce→visible p99 per instance, ms, min / median / max",
    "broker CPU",
    "booting at once from one peer: last ready",
    "peer GET p99 meanwhile",
    "broker CPU",
)


def limit_of(run: CountRun, alone: float) -> str:
    """What held simultaneous restores back: the broker (busy) or the machine's CPUs."""
    together = sum(r["rate"] for r in run.restores)
    cpu = run.restore_cpu[0] if run.restore_cpu else float("nan")
    busy = cpu >= 80
    return (
        f"{run.n} restores together: {together:,.0f} records/s in all against {alone:,.0f} "
        f"alone, broker CPU {cpu:.0f} % of one core: "
        + (
            "the broker is the limit"
            if busy
            else f"not the broker; the instances share the machine's {os.cpu_count()} CPUs"
        )
    )


def instance_verdicts(runs: list[CountRun]) -> list[str]:
    alone = median([r["rate"] for r in runs[0].restores]) if runs[0].restores else float("nan")
    out = []
    for run in runs:
        if run.n == 5 and run.restores:
            worst = min(r["rate"] for r in run.restores) / alone
            out.append(
                f"five simultaneous cold restores, the slowest at {worst:.0%} of one "
                f"alone (target ≥ 50 %): {'PASS' if worst >= 0.5 else 'MISS'}"
            )
            out.append(limit_of(run, alone))
        if run.n == 20 and run.peer_gets:
            p99 = quantile(run.peer_gets, 0.99) * 1000
            out.append(
                f"peer GET p99 during the 20-instance fan-out {p99:.1f} ms (target "
                f"< {PEER_GET_P99_TARGET_MS:g} ms): "
                f"{'PASS' if p99 < PEER_GET_P99_TARGET_MS else 'MISS'}"
            )
    return out


def draw_instances(runs: list[CountRun]) -> list[tuple[str, str]]:
    import charts  # noqa: PLC0415 - matplotlib only in the parent, never in a step

    xs = [r.n for r in runs]
    nan = float("nan")
    pictures = {
        "img/scale-instances-restore.png": (
            "Cold restores at the same moment: records/s per instance",
            "records/s",
            {
                "median instance": [
                    median([x["rate"] for x in r.restores]) if r.restores else nan for r in runs
                ],
                "slowest instance": [
                    min([x["rate"] for x in r.restores], default=nan) for r in runs
                ],
            },
        ),
        "img/scale-instances-broker-cpu.png": (
            "Broker CPU by number of instances",
            "% of one core",
            {
                "restoring": [r.restore_cpu[0] if r.restore_cpu else nan for r in runs],
                "following": [r.follow_cpu[0] if r.follow_cpu else nan for r in runs],
                "booting from a peer": [r.boot_cpu[0] if r.boot_cpu else nan for r in runs],
            },
        ),
        "img/scale-instances-follow.png": (
            "Produce→visible p99 while following, worst instance",
            "ms",
            {"worst instance": [max([f["p99_ms"] for f in r.follows], default=nan) for r in runs]},
        ),
        "img/scale-instances-fan-out.png": (
            "Booting at once from one peer's snapshot",
            "seconds / ms",
            {
                "last ready, s": [r.last_ready_s for r in runs],
                "peer GET p99, ms": [
                    quantile(r.peer_gets, 0.99) * 1000 if r.peer_gets else nan for r in runs
                ],
            },
        ),
    }
    for name, (title, unit, series) in pictures.items():
        charts.loglog(DOCS.parent / name, title, xs, series, unit)
    return [(name, title) for name, (title, _, _) in pictures.items()]


def instances(args: argparse.Namespace, bootstrap: str, work: Path, pid: int | None) -> str:
    topic = f"bench-scale-instances-{uuid.uuid4().hex[:6]}"
    fill_s = fill(bootstrap, topic, args.keys, order)
    counts = [int(n) for n in args.instances.split(",")]
    if counts[0] != 1:
        counts.insert(0, 1)  # one alone: what the others are compared with
    runs = []
    try:
        for n in counts:
            runs.append(measure_count(n, bootstrap, topic, work, pid, args))
    finally:
        delete_topic(bootstrap, topic)
    text = markdown(INSTANCE_HEADER, instance_rows(runs))
    verdicts = instance_verdicts(runs)
    notes = [
        f"One topic of {args.keys:,} keys (~{VALUE_BYTES}-byte values, produced in "
        f"{fill_s:.0f}s), one store directory per instance; every instance is a process "
        "of its own on this machine, beside the broker.",
        "Broker CPU: the broker process's utime + stime over the phase, in % of one core "
        f"(the machine has {os.cpu_count()}).",
        f"Following: a writer process overwrites random keys at {args.rate:,} records/s and "
        f"this process sends 50 probe records/s for {args.seconds:g}s after a "
        f"{args.warmup:g}s warm-up at the same load; each instance times "
        "produce→visible of every probe (the send time is in its key; on_changes listener).",
        f"Booting: the peer is `globalstore serve --max-snapshots {args.max_snapshots}` on "
        "the first instance's store; every new instance is a GlobalStore with bootstrap_from= "
        "its snapshot URL. A download that finds no free slot within the peer's --max-wait "
        "gets 503 and asks again as Retry-After says, until its start timeout, then restores "
        "from Kafka: the count from the snapshot says how many got one. Meanwhile one "
        "connection GETs random keys from the peer, one request at a time.",
    ]
    print(text)
    for v in verdicts:
        print(v)
    pictures = draw_instances(runs) if args.write_docs else []
    return "\n".join(
        [
            text,
            "",
            *[f"- {n}" for n in notes + verdicts],
            "",
            *[f"![{t}]({p})\n" for p, t in pictures],
        ]
    ).rstrip()


# -- main ----------------------------------------------------------------------------------


def section(heading: str, about: str, body: str) -> str:
    command = f"python benchmarks/bench_scale.py {' '.join(sys.argv[1:])}"
    return (
        "\n".join(
            [heading, "", f"Machine: {about}.", "", f"Command: `{command}`.", "", body]
        ).rstrip()
        + "\n"
    )


def measure(
    args: argparse.Namespace, bootstrap: str, version: str, pid: int | None, work: Path
) -> None:
    log(f"broker pid {pid}: {'its CPU is measured' if pid else 'not found: no broker CPU'}")
    about = machine(version)
    modes = (
        ("## Scale: sizes", args.sizes, sizes),
        ("## Scale: instances", args.instances, functools.partial(instances, pid=pid)),
    )
    for heading, wanted, mode in modes:
        if not wanted:
            continue
        before, began = os.getloadavg()[0], time.perf_counter()
        body = mode(args, bootstrap, work)
        load = (
            f"- Load average (1 min) {before:.1f} before and {os.getloadavg()[0]:.1f} after, "
            f"on {os.cpu_count()} CPUs shared with other work; "
            f"{(time.perf_counter() - began) / 60:.0f} minutes in all."
        )
        log(load)
        if args.write_docs:
            write_docs(section(heading, about, body + "\n\n" + load), heading)


def main() -> None:
    if sys.argv[1:2] == ["--step"]:
        print(json.dumps(STEPS[sys.argv[2]](*json.loads(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", metavar="KEYS,KEYS,...", help="size measures at these sizes")
    parser.add_argument("--instances", metavar="N,N,...", help="instance measures, N processes")
    parser.add_argument("--keys", type=int, default=1_000_000, help="topic size for --instances")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each size measure")
    parser.add_argument("--rate", type=int, default=5_000, help="rec/s written while following")
    parser.add_argument("--seconds", type=float, default=20.0, help="following, per count")
    parser.add_argument(
        "--warmup", type=float, default=60.0, help="following before it is timed, per count"
    )
    parser.add_argument(
        "--max-snapshots", type=int, default=2, help="the peer's cap (default the serve default)"
    )
    parser.add_argument("--quick", action="store_true", help="skip the 2.7 GB large-value topic")
    parser.add_argument("--work", type=Path, help="directory for stores and the local broker")
    parser.add_argument("--bootstrap-servers", help="Use this broker (on this machine).")
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    args = parser.parse_args()
    if not (args.sizes or args.instances):
        parser.error("say --sizes, --instances or both")
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.work) as tmp:
        work = Path(tmp)
        if args.bootstrap_servers:
            port = int(args.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])
            measure(args, args.bootstrap_servers, "(existing cluster)", listening_pid(port), work)
            return
        log("starting a local Kafka broker")
        with LocalKafka(port=free_port(), data_dir=work / "kafka", heap="1g") as broker:
            status = broker.status()
            measure(args, broker.bootstrap, status.version, status.pid, work)


if __name__ == "__main__":
    main()
