"""Fresh under load: produce→visible while the store's process is read hard.

    python benchmarks/bench_freshness.py [--seconds 60] [--rounds 2]
    python benchmarks/bench_freshness.py --checkouts "main=../main;branch=." \
        --variants "in-process, 3 readers" --seconds 120 --rounds 3

A background writer produces --rate records/s (15k) to random keys of a 100k-key topic; a
probe writer produces one probe record every 20 ms carrying its send time; in the store's
process a poller thread spins on `get` until each probe shows (as a new user would test it),
while R reader threads call `get` on random keys as fast as they can. Each variant runs in a
fresh child process, the variants alternate, and the table gives medians over rounds.

Variants:
    in-process        GlobalStore, its follower thread in the readers' process
    two declared indexes  the same store with indexes={"by_customer": "customer",
                      "by_status": "status"} (read in C; the values carry both fields)
    switch 0.5 ms     the same, with sys.setswitchinterval(0.0005): the causal test of the
                      GIL (a follower waiting for the GIL waits up to one switch interval
                      each time it takes it back)
    shared            SharedStore: the follower in a writer process of its own (`globalstore
                      follow`), the readers' process catches up when woken
    own writer        SharedStore.with_writer(): the same, the writer process started and
                      stopped by the store itself (what one embedding application writes)
    idle              the follower idle (the background writes go to another topic, so the
                      broker and the producer cost the same): the readers' own throughput,
                      the baseline of the "≤ 10 % fewer reads" target
    4 processes       one writer process, 4 reader processes, each looking for the probe
                      every 0.2 ms (no reader threads: four spinning processes would only
                      measure how 2 cores are shared)
    serve             `globalstore serve` (its follower in the server's process) answering
                      GET by key from wrk with 16 connections as fast as it can; a prober
                      process GETs the next probe over HTTP every 0.5 ms
    serve --workers 1 the same API answered by one worker process reading (SharedStore) the
                      store the serve process writes
    dict              the ceiling: no globalstore, a hand-rolled consumer thread putting
                      each record's value into a dict (one consume call a batch, nothing
                      else), the readers decoding the JSON they get, as a user's consumer-
                      into-a-dict would
    nice 5            the readers' process at nice 5, so the writer process gets a CPU first
                      when records arrive: the causal test of CPU waits

Every variant also reports the CPU its readers used (the reader threads' own thread time; for
the serve variants the CPU of the server's processes, its follower and workers included) and
the machine's busy share during the run: reads per CPU second tell a read that got dearer
from a reader that got less CPU. --pin runs
the readers' processes on CPU 1 and everything else on CPU 0, as if the readers had a core of
their own. The serve variants need wrk on the PATH (apt-get install wrk).

--checkouts runs each variant (dict once a round) once per checkout of this project
(LABEL=PATH, separated by semicolons; each built, C loop included), alternating which goes
first from round to round: the store's processes import globalstore from that checkout
(PYTHONPATH), everything else (broker, writers, probes) is shared. The serve variants are
not compared this way.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import urllib3
from bench_store import create_topic, fill_topic, key_of, log, quantile
from confluent_kafka import Consumer, Producer, TopicPartition

from globalstore import GlobalStore, SharedStore
from globalstore.codec import format_headers
from globalstore.localkafka import LocalKafka, free_port

HERE = Path(__file__).resolve()
PROBE_EVERY_S = 0.02
STEADY_LAG = 2000  # records behind the topic's end (~0.1 s of writes): following, not catching up
DECLARED = {"by_customer": "customer", "by_status": "status"}
VARIANTS: dict[str, dict[str, Any]] = {
    "in-process, 0 readers": {"mode": "in-process", "readers": 0},
    "in-process, 3 readers": {"mode": "in-process", "readers": 3},
    "in-process, 0 readers, two declared indexes": {
        "mode": "in-process",
        "readers": 0,
        "indexes": DECLARED,
    },
    "in-process, 3 readers, two declared indexes": {
        "mode": "in-process",
        "readers": 3,
        "indexes": DECLARED,
    },
    "dict, 3 readers": {"mode": "dict", "readers": 3},
    "in-process, 3 readers, switch 0.5 ms": {
        "mode": "in-process",
        "readers": 3,
        "switch": 0.0005,
    },
    "in-process, 3 readers, two declared indexes, switch 0.5 ms": {
        "mode": "in-process",
        "readers": 3,
        "indexes": DECLARED,
        "switch": 0.0005,
    },
    "shared, 3 readers": {"mode": "shared", "readers": 3},
    "own writer, 0 readers": {"mode": "own writer", "readers": 0},
    "own writer, 3 readers": {"mode": "own writer", "readers": 3},
    "shared, 3 readers, switch 0.5 ms": {"mode": "shared", "readers": 3, "switch": 0.0005},
    "in-process, 3 readers, idle": {"mode": "in-process", "readers": 3, "idle": True},
    "shared, 3 readers, idle": {"mode": "shared", "readers": 3, "idle": True},
    "shared, 3 readers, readers at nice 5": {"mode": "shared", "readers": 3, "nice": 5},
    "shared, 4 reader processes": {
        "mode": "shared",
        "readers": 0,
        "processes": 4,
    },
    "serve, 16 connections": {"mode": "serve"},
    "serve, 16 connections, idle": {"mode": "serve", "idle": True},
    "serve --workers 1, 16 connections": {"mode": "serve", "workers": 1},
    "serve --workers 1, 16 connections, idle": {"mode": "serve", "workers": 1, "idle": True},
}
HTTP_PROBE_PAUSE_S = 0.0005
CONNECTIONS = 16
PINNED_READERS, PINNED_REST = {1}, {0}
WRK_SCRIPT = """
request = function()
  return wrk.format("GET", string.format("/v1/keys/key-%%08d", math.random(0, %d)))
end
"""


# -- children ------------------------------------------------------------------------------


def probe_writer(bootstrap: str, topic: str, prefix: str, stop: str) -> None:
    """One probe every 20 ms until `stop` exists: key <prefix>-<n>, value {"sent": time}."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    headers = format_headers()
    for n in itertools.count():
        if os.path.exists(stop):
            break
        value = orjson.dumps({"sent": time.time()})
        producer.produce(topic, key=f"{prefix}-{n}".encode(), value=value, headers=headers)
        producer.poll(0)
        time.sleep(PROBE_EVERY_S)
    producer.flush(10)


def store_writer(bootstrap: str, topic: str, path: str, stop: str) -> None:
    """The writer of the shared variants (what `globalstore follow` runs)."""
    with GlobalStore(topic, bootstrap, path).start(timeout=300):
        while not os.path.exists(stop):
            time.sleep(0.1)


def contestant(settings: dict[str, Any]) -> dict[str, Any]:
    """Open the store and read for `seconds`: latencies of the probes seen, and reads/s.

    The readers look for the next probe after every 100 random gets (~0.2 ms), so a probe
    counts as visible when the threads that read could see it: what a request handler
    would read. With no readers, one thread looks for it every `poll_pause` seconds (a
    thread of its own among spinning readers would measure its own wait for the GIL).
    """
    if "switch" in settings:
        sys.setswitchinterval(settings["switch"])
    bootstrap, topic, path = settings["bootstrap"], settings["topic"], settings["path"]
    if settings["mode"] == "shared":
        store: Any = SharedStore(path).start(timeout=300)
    elif settings["mode"] == "own writer":
        store = SharedStore.with_writer(topic, bootstrap, path).start(timeout=300)
    elif settings["mode"] == "dict":
        store = DictFollower(bootstrap, topic)
    else:
        indexes = settings.get("indexes", {})
        store = GlobalStore(topic, bootstrap, path, indexes=indexes).start(timeout=300)
    # Steady: the keys counted after a bulk restore, and the records written during the
    # restore applied (the topic grows through the run: later rounds restore longer).
    store.count()
    while sum(store.status().lag.values()) > STEADY_LAG:
        time.sleep(0.1)
    # Ready: the run (and the probes) start once every store of the variant is steady.
    Path(settings["path"] + f".ready-{os.getpid()}").touch()
    while not Path(settings["go"]).exists():
        time.sleep(0.05)
    probes = Probes(store, settings["prefix"])
    stop, reads = threading.Event(), [0] * max(1, settings["readers"])
    cpu = [0.0] * len(reads)

    def read(slot: int) -> None:
        rng, get, keys = random.Random(slot), store.get, settings["keys"]
        began = time.thread_time()
        while not stop.is_set():
            for _ in range(100):
                get(key_of(rng.randrange(keys)))
            reads[slot] += 100
            probes.look()
        cpu[slot] = time.thread_time() - began

    def poll(slot: int) -> None:
        while not stop.is_set():
            probes.look()
            time.sleep(settings["poll_pause"])

    work = read if settings["readers"] else poll
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(reads))]
    for thread in threads:
        thread.start()
    time.sleep(settings["seconds"])
    stop.set()
    for thread in threads:
        thread.join()
    store.close()
    seconds = settings["seconds"]
    return {"seen": probes.seen, "reads_per_s": sum(reads) / seconds, "cpu": sum(cpu) / seconds}


class DictFollower:
    """The ceiling of an in-process follower: a consumer thread into a dict, with the
    smallest per-batch work a Python follower can have (one consume call, a dict update a
    record), and the store's `get`, `count`, `status().lag` and `close` the run uses."""

    BATCH = 10_000

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.values: dict[bytes, bytes] = {}
        settings = {"bootstrap.servers": bootstrap, "group.id": "dict-follower"}
        settings.update({"enable.auto.commit": False, "fetch.wait.max.ms": 10})
        self.consumer = Consumer(settings)
        partitions = self.consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self.end = {
            p: self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
        self.next = dict.fromkeys(self.end, 0)
        self.consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.follow, daemon=True)
        self.thread.start()

    def follow(self) -> None:
        values, consume, nexts = self.values, self.consumer.consume, self.next
        while not self.stopped.is_set():
            for m in consume(self.BATCH, 0.1):
                if m.error() is None:
                    values[m.key()] = m.value()
                    nexts[m.partition()] = m.offset() + 1

    def get(self, key: str) -> Any:
        value = self.values.get(key.encode())
        return None if value is None else orjson.loads(value)

    def count(self) -> int:
        return len(self.values)

    def status(self) -> Any:
        # Behind the end of the topic when this follower started: steady once past it.
        return SimpleNamespace(lag={p: max(0, e - self.next[p]) for p, e in self.end.items()})

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.consumer.close()


class Probes:
    """The next probe to look for, shared by the threads that read."""

    def __init__(self, store: Any, prefix: str) -> None:
        self.store, self.prefix = store, prefix
        self.next = 0
        self.seen: list[float] = []
        self._found = threading.Lock()

    def look(self) -> None:
        n = self.next
        value = self.store.get(f"{self.prefix}-{n}")
        if value is None:
            return
        with self._found:
            if self.next == n:  # not counted by another thread meanwhile
                self.seen.append(time.time() - value["sent"])
                self.next = n + 1


def http_prober(port: str, prefix: str, stop: str) -> None:
    """GET the next probe every HTTP_PROBE_PAUSE_S until `stop` exists; prints the
    produce→visible seconds of each probe seen, as JSON."""
    pool = urllib3.HTTPConnectionPool("127.0.0.1", int(port), maxsize=1)
    seen, n = [], 0
    while not os.path.exists(stop):
        response = pool.request("GET", f"/v1/keys/{prefix}-{n}", retries=False)
        if response.status == 200:
            seen.append(time.time() - orjson.loads(response.data)["value"]["sent"])
            n += 1
        else:
            time.sleep(HTTP_PROBE_PAUSE_S)
    print(json.dumps(seen))


# -- one round of one variant --------------------------------------------------------------


def child(
    args: list[str],
    out: Path | None = None,
    cpus: set[int] | None = None,
    nice: int = 0,
    checkout: Path | None = None,
) -> subprocess.Popen[bytes]:
    """This script in a child process (on `cpus` when given, at `nice`), its stdout in `out`,
    importing globalstore from `checkout` when given."""
    command = [sys.executable, str(HERE), *args]
    env = None if checkout is None else checkout_env(checkout)
    return spawn(command, out, cpus, nice, env)


def checkout_env(checkout: Path) -> dict[str, str]:
    """This environment, importing globalstore from `checkout` before any installed one."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(HERE.parent)])}


def spawn(
    command: list[str],
    out: Path | None = None,
    cpus: set[int] | None = None,
    nice: int = 0,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    if nice:
        command = ["nice", "-n", str(nice), *command]
    if cpus is not None:
        command = ["taskset", "-c", ",".join(map(str, sorted(cpus))), *command]
    if out is None:
        return subprocess.Popen(command, env=env)
    with out.open("wb") as stdout:  # the child holds its own copy of the descriptor
        return subprocess.Popen(command, stdout=stdout, env=env)


def busy_share(before: list[int], after: list[int]) -> float:
    """The machine's busy share between two /proc/stat "cpu" lines (idle and iowait idle)."""
    delta = [b - a for a, b in zip(before, after, strict=True)]
    return 1 - (delta[3] + delta[4]) / sum(delta)


def cpu_times() -> list[int]:
    with open("/proc/stat", encoding="ascii") as stat:
        return [int(x) for x in stat.readline().split()[1:]]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of a process and its children (serve's workers)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as children:
        return own + sum(process_cpu_s(int(child)) for child in children.read().split())


@dataclass(frozen=True)
class Bench:
    """What every round of every variant shares."""

    bootstrap: str
    topic: str
    workdir: Path
    keys: int
    rate: int
    seconds: float
    pin: bool

    def cpus(self, readers: bool) -> set[int] | None:
        if not self.pin:
            return None
        return PINNED_READERS if readers else PINNED_REST


def run_variant(name: str, bench: Bench, checkout: Path | None = None) -> dict[str, Any]:
    """One round of one variant (its stores from `checkout`, if given): the probes seen (s),
    reads/s, the readers' CPU (cores) and the machine's busy share."""
    variant, tag = VARIANTS[name], f"{time.time_ns():x}"
    stop = bench.workdir / f"stop-{tag}"
    written = f"{bench.topic}-idle" if variant.get("idle") else bench.topic
    writer = [sys.executable, str(HERE.parent / "bench_store.py"), "--writer", bench.bootstrap]
    helpers = [subprocess.Popen([*writer, written, str(bench.keys), str(bench.rate), str(stop)])]
    try:
        if variant["mode"] == "serve":
            return run_server(variant, bench, tag, helpers)
        return run_readers(variant, bench, tag, helpers, checkout)
    finally:
        stop.touch()
        for proc in helpers:
            proc.wait(120)


def run_readers(
    variant: dict[str, Any],
    bench: Bench,
    tag: str,
    helpers: list[subprocess.Popen[bytes]],
    checkout: Path | None,
) -> dict[str, Any]:
    """The variants whose readers are threads (or processes) of this script."""
    workdir, stop, path = (
        bench.workdir,
        bench.workdir / f"stop-{tag}",
        bench.workdir / f"store-{tag}",
    )
    if variant["mode"] == "shared":
        writer = ["--store-writer", bench.bootstrap, bench.topic, str(path), str(stop)]
        helpers.append(child(writer, checkout=checkout))
    settings = {**variant, "bootstrap": bench.bootstrap, "topic": bench.topic, "path": str(path)}
    settings.update(keys=bench.keys, seconds=bench.seconds, prefix=f"probe-{tag}")
    settings.update(poll_pause=0.0002)
    outs = [workdir / f"out-{tag}-{i}.json" for i in range(variant.get("processes", 1))]
    go = workdir / f"go-{tag}"
    settings["go"] = str(go)
    nice = variant.get("nice", 0)
    cpus = bench.cpus(readers=True)
    contest = ["--contestant", json.dumps(settings)]
    stores = [child(contest, out, cpus, nice, checkout) for out in outs]
    while len(list(workdir.glob(f"store-{tag}.ready-*"))) < len(stores):
        if any(proc.poll() is not None for proc in stores):
            raise RuntimeError("a store process ended before it was ready")
        time.sleep(0.1)
    if not variant.get("idle"):
        probes = ["--probes", bench.bootstrap, bench.topic, settings["prefix"], str(stop)]
        helpers.append(child(probes))
    before = cpu_times()
    go.touch()
    for proc in stores:
        proc.wait(bench.seconds + 600)
    busy = busy_share(before, cpu_times())
    results = [json.loads(out.read_text()) for out in outs]
    return {
        "seen": sorted(s for r in results for s in r["seen"]),
        "reads_per_s": sum(r["reads_per_s"] for r in results),
        "cpu": sum(r["cpu"] for r in results),
        "busy": busy,
    }


def run_server(
    variant: dict[str, Any], bench: Bench, tag: str, helpers: list[subprocess.Popen[bytes]]
) -> dict[str, Any]:
    """The serve variants: wrk reads over HTTP, a prober process looks for the probes."""
    workdir, stop, path = bench.workdir, bench.workdir / f"stop-{tag}", bench.workdir / tag
    port, prefix = str(free_port()), f"probe-{tag}"
    cli = str(Path(sys.executable).parent / "globalstore")
    command = [cli, "serve", "--topic", bench.topic, "--bootstrap-servers", bench.bootstrap]
    command += ["--path", str(path), "--workers", str(variant.get("workers", 0)), "--port", port]
    api = spawn(command, cpus=bench.cpus(readers=True))
    try:
        wait_steady(port, api)
        seen_out = workdir / f"seen-{tag}.json"
        if not variant.get("idle"):
            helpers.append(child(["--probes", bench.bootstrap, bench.topic, prefix, str(stop)]))
            helpers.append(child(["--http-prober", port, prefix, str(stop)], seen_out))
        script = workdir / f"wrk-{tag}.lua"
        script.write_text(WRK_SCRIPT % (bench.keys - 1))
        before, api_before = cpu_times(), process_cpu_s(api.pid)
        load = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{bench.seconds:.0f}s", "-s", str(script)]
        wrk = subprocess.run(
            [*load, f"http://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            check=True,
        )
        busy = busy_share(before, cpu_times())
        cpu = (process_cpu_s(api.pid) - api_before) / bench.seconds
    finally:
        stop.touch()
        api.terminate()
        api.wait(60)
    for proc in helpers:
        proc.wait(120)
    # wrk (like every helper) runs on the CPUs this script was pinned to.
    found = re.search(r"Requests/sec:\s+([\d.]+)", wrk.stdout)
    if found is None or "Non-2xx" in wrk.stdout:
        raise RuntimeError(f"wrk: {wrk.stdout}")
    seen = json.loads(seen_out.read_text()) if not variant.get("idle") else []
    return {"seen": sorted(seen), "reads_per_s": float(found[1]), "cpu": cpu, "busy": busy}


def wait_steady(port: str, api: subprocess.Popen[bytes]) -> None:
    """Until the API is ready and its store no more than STEADY_LAG records behind."""
    pool = urllib3.HTTPConnectionPool("127.0.0.1", int(port), maxsize=1)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if api.poll() is not None:
            raise RuntimeError("the API process ended before it was ready")
        try:
            status = pool.request("GET", "/v1/status", retries=False)
        except urllib3.exceptions.HTTPError:
            status = None
        if status is not None and status.status == 200:
            report = orjson.loads(status.data)
            if report["ready"] and sum(report["lag"].values()) <= STEADY_LAG:
                return
        time.sleep(0.2)
    raise RuntimeError("the API's store did not get steady within 600 s")


def summarise(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over rounds of each round's p50, p99 and max (ms), reads/s, the readers' CPU
    (cores), reads per CPU second and the machine's busy share."""

    def med(f: Any) -> float:
        return statistics.median(f(r) for r in rounds)

    def pick(q: float) -> Any:
        return lambda r: quantile(r["seen"], q) * 1000 if r["seen"] else float("nan")

    return {
        "p50": med(pick(0.5)),
        "p99": med(pick(0.99)),
        "max": med(lambda r: max(r["seen"], default=float("nan")) * 1000),
        "samples": med(lambda r: len(r["seen"])),
        "reads_per_s": med(lambda r: r["reads_per_s"]),
        "cpu": med(lambda r: r["cpu"]),
        "reads_per_cpu_s": med(lambda r: r["reads_per_s"] / r["cpu"] if r["cpu"] else 0.0),
        "busy": med(lambda r: r["busy"]),
    }


def table(results: dict[str, dict[str, float]], args: argparse.Namespace) -> str:
    pinned = "; readers pinned to CPU 1, the rest to CPU 0" if args.pin else ""
    lines = [
        f"Background writes {args.rate:,} records/s; one probe every 20 ms; {args.seconds:.0f} "
        f"s per round; {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"{time.strftime('%Y-%m-%d')}{pinned}.",
        "",
        "| variant | produce→visible p50 | p99 | max | probes | reads/s | readers' CPU | "
        "reads/CPU s | machine busy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        reads = f"{r['reads_per_s']:,.0f}" if r["reads_per_s"] else "—"
        if r["samples"] == 0:
            p50 = p99 = top = "—"
        else:
            p50, p99, top = f"{r['p50']:.1f} ms", f"{r['p99']:.1f} ms", f"{r['max']:.0f} ms"
        cpu = f"{r['cpu']:.2f} | {r['reads_per_cpu_s']:,.0f} | {r['busy']:.0%}"
        lines.append(f"| {name} | {p50} | {p99} | {top} | {r['samples']:.0f} | {reads} | {cpu} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--probes"]:
        probe_writer(*sys.argv[2:6])
        return
    if sys.argv[1:2] == ["--store-writer"]:
        store_writer(*sys.argv[2:6])
        return
    if sys.argv[1:2] == ["--http-prober"]:
        http_prober(*sys.argv[2:5])
        return
    if sys.argv[1:2] == ["--contestant"]:
        print(json.dumps(contestant(json.loads(sys.argv[2]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=15_000)
    parser.add_argument("--variants", help="names separated by semicolons (default: all)")
    parser.add_argument("--pin", action="store_true", help="readers on CPU 1, the rest on 0")
    parser.add_argument("--checkouts", help="LABEL=PATH;LABEL=PATH: each variant in each")
    args = parser.parse_args()
    serving = any(VARIANTS[name]["mode"] == "serve" for name in names(args))
    if serving and not shutil.which("wrk"):
        parser.error("the serve variants need wrk on the PATH (apt-get install wrk)")
    if serving and args.checkouts:
        parser.error("--checkouts compares the variants whose readers are this script's")
    if args.pin:
        os.sched_setaffinity(0, PINNED_REST)  # the broker and every helper inherit it
    with tempfile.TemporaryDirectory(prefix="bench-fresh-") as tmp:
        workdir = Path(tmp)
        broker = LocalKafka(port=free_port(), data_dir=workdir / "kafka", heap="1g")
        with broker:
            topic = "fresh"
            create_topic(broker.bootstrap, topic)
            create_topic(broker.bootstrap, f"{topic}-idle")  # the idle variant's writes
            fill_topic(broker.bootstrap, topic, args.keys, "small batches")
            bench = Bench(
                broker.bootstrap, topic, workdir, args.keys, args.rate, args.seconds, args.pin
            )
            rounds: dict[str, list[dict[str, Any]]] = {}
            for r in range(args.rounds):
                for name, label, checkout in runs(args, r):
                    shown = name if label is None else f"{name} [{label}]"
                    log(f"round {r + 1}: {shown}")
                    result = run_variant(name, bench, checkout)
                    rounds.setdefault(shown, []).append(result)
                    log(f"  {summarise([result])}")
    print(table({name: summarise(rs) for name, rs in rounds.items()}, args))


def runs(args: argparse.Namespace, r: int) -> list[tuple[str, str | None, Path | None]]:
    """Round r's runs: (variant, checkout label, checkout), each checkout in turn per variant,
    the one that goes first alternating from round to round."""
    if not args.checkouts:
        return [(name, None, None) for name in names(args)]
    given = [pair.split("=", 1) for pair in args.checkouts.split(";")]
    checkouts = [(label, Path(path).resolve()) for label, path in given]
    ordered = checkouts if r % 2 == 0 else checkouts[::-1]
    out: list[tuple[str, str | None, Path | None]] = []
    for name in names(args):
        if VARIANTS[name]["mode"] == "dict":  # no globalstore in it: once a round
            out.append((name, None, None))
        else:
            out += [(name, label, path) for label, path in ordered]
    return out


def names(args: argparse.Namespace) -> list[str]:
    return args.variants.split(";") if args.variants else list(VARIANTS)


if __name__ == "__main__":
    main()
