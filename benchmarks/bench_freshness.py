"""Fresh under load: produce→visible while the store's process is read hard.

    python benchmarks/bench_freshness.py [--seconds 60] [--rounds 2] [--write-docs]

A background writer produces --rate records/s (15k) to random keys of a 100k-key topic; a
probe writer produces one probe record every 20 ms carrying its send time; in the store's
process a poller thread spins on `get` until each probe shows (as a new user would test it),
while R reader threads call `get` on random keys as fast as they can. Each variant runs in a
fresh child process, the variants alternate, and the table gives medians over rounds.

Variants:
    in-process        GlobalStore, its follower thread in the readers' process
    switch 0.5 ms     the same, with sys.setswitchinterval(0.0005): the causal test of the
                      GIL (a follower waiting for the GIL waits up to one switch interval
                      each time it takes it back)
    shared            SharedStore: the follower in a writer process of its own (`globalstore
                      follow`), the readers' process catches up when woken
    idle              the follower idle (the background writes go to another topic, so the
                      broker and the producer cost the same): the readers' own throughput,
                      the baseline of the "≤ 10 % fewer reads" target
    4 processes       one writer process, 4 reader processes, each looking for the probe
                      every 0.2 ms (no reader threads: four spinning processes would only
                      measure how 2 cores are shared)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from bench_store import create_topic, fill_topic, key_of, log, quantile
from confluent_kafka import Producer

from globalstore import GlobalStore, SharedStore
from globalstore.codec import format_headers
from globalstore.localkafka import LocalKafka, free_port

HERE = Path(__file__).resolve()
DOCS = HERE.parent.parent / "docs" / "benchmarks.md"
PROBE_EVERY_S = 0.02
STEADY_LAG = 2000  # records behind the topic's end (~0.1 s of writes): following, not catching up
VARIANTS: dict[str, dict[str, Any]] = {
    "in-process, 0 readers": {"mode": "in-process", "readers": 0},
    "in-process, 3 readers": {"mode": "in-process", "readers": 3},
    "in-process, 3 readers, switch 0.5 ms": {
        "mode": "in-process",
        "readers": 3,
        "switch": 0.0005,
    },
    "shared, 3 readers": {"mode": "shared", "readers": 3},
    "shared, 3 readers, switch 0.5 ms": {"mode": "shared", "readers": 3, "switch": 0.0005},
    "in-process, 3 readers, idle": {"mode": "in-process", "readers": 3, "idle": True},
    "shared, 3 readers, idle": {"mode": "shared", "readers": 3, "idle": True},
    "shared, 4 reader processes": {
        "mode": "shared",
        "readers": 0,
        "processes": 4,
    },
}


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
    else:
        store = GlobalStore(topic, bootstrap, path).start(timeout=300)
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

    def read(slot: int) -> None:
        rng, get, keys = random.Random(slot), store.get, settings["keys"]
        while not stop.is_set():
            for _ in range(100):
                get(key_of(rng.randrange(keys)))
            reads[slot] += 100
            probes.look()

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
    return {"seen": probes.seen, "reads_per_s": sum(reads) / settings["seconds"]}


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


# -- one round of one variant --------------------------------------------------------------


def child(args: list[str], out: Path | None = None) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(HERE), *args]
    if out is None:
        return subprocess.Popen(command)
    with out.open("wb") as stdout:  # the child holds its own copy of the descriptor
        return subprocess.Popen(command, stdout=stdout)


def run_variant(
    name: str, bootstrap: str, topic: str, workdir: Path, keys: int, rate: int, seconds: float
) -> dict[str, Any]:
    variant, tag = VARIANTS[name], f"{time.time_ns():x}"
    stop = workdir / f"stop-{tag}"
    path = workdir / f"store-{tag}"
    written = f"{topic}-idle" if variant.get("idle") else topic
    writer = [sys.executable, str(HERE.parent / "bench_store.py"), "--writer", bootstrap]
    helpers = [subprocess.Popen([*writer, written, str(keys), str(rate), str(stop)])]
    if variant["mode"] == "shared":
        helpers.append(child(["--store-writer", bootstrap, topic, str(path), str(stop)]))
    settings = {**variant, "bootstrap": bootstrap, "topic": topic, "path": str(path)}
    settings.update(keys=keys, seconds=seconds, prefix=f"probe-{tag}", poll_pause=0.0002)
    outs = [workdir / f"out-{tag}-{i}.json" for i in range(variant.get("processes", 1))]
    go = workdir / f"go-{tag}"
    settings["go"] = str(go)
    stores = [child(["--contestant", json.dumps(settings)], out) for out in outs]
    while len(list(workdir.glob(f"store-{tag}.ready-*"))) < len(stores):
        if any(proc.poll() is not None for proc in stores):
            raise RuntimeError(f"{name}: a store process ended before it was ready")
        time.sleep(0.1)
    if not variant.get("idle"):
        helpers.append(child(["--probes", bootstrap, topic, settings["prefix"], str(stop)]))
    go.touch()
    for proc in stores:
        proc.wait(seconds + 600)
    stop.touch()
    for proc in helpers:
        proc.wait(120)
    results = [json.loads(out.read_text()) for out in outs]
    seen = sorted(s for r in results for s in r["seen"])
    return {"seen": seen, "reads_per_s": sum(r["reads_per_s"] for r in results)}


def summarise(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over rounds of each round's p50, p99 and max (ms) and reads/s."""

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
    }


def table(results: dict[str, dict[str, float]], rate: int, seconds: float) -> str:
    lines = [
        f"Background writes {rate:,} records/s; one probe every 20 ms; {seconds:.0f} s per "
        f"round; {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| variant | produce→visible p50 | p99 | max | probes | reads/s |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        reads = f"{r['reads_per_s']:,.0f}" if r["reads_per_s"] else "—"
        if r["samples"] == 0:
            p50 = p99 = top = "—"
        else:
            p50, p99, top = f"{r['p50']:.1f} ms", f"{r['p99']:.1f} ms", f"{r['max']:.0f} ms"
        lines.append(f"| {name} | {p50} | {p99} | {top} | {r['samples']:.0f} | {reads} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--probes"]:
        probe_writer(*sys.argv[2:6])
        return
    if sys.argv[1:2] == ["--store-writer"]:
        store_writer(*sys.argv[2:6])
        return
    if sys.argv[1:2] == ["--contestant"]:
        print(json.dumps(contestant(json.loads(sys.argv[2]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=15_000)
    parser.add_argument("--variants", help="comma-separated names (default: all)")
    args = parser.parse_args()
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    with tempfile.TemporaryDirectory(prefix="bench-fresh-") as tmp:
        workdir = Path(tmp)
        broker = LocalKafka(port=free_port(), data_dir=workdir / "kafka", heap="1g")
        with broker:
            topic = "fresh"
            create_topic(broker.bootstrap, topic)
            create_topic(broker.bootstrap, f"{topic}-idle")  # the idle variant's writes
            fill_topic(broker.bootstrap, topic, args.keys, "small batches")
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for r in range(args.rounds):
                for name in names:
                    log(f"round {r + 1}: {name}")
                    result = run_variant(
                        name, broker.bootstrap, topic, workdir, args.keys, args.rate, args.seconds
                    )
                    rounds[name].append(result)
                    log(f"  {summarise([result])}")
    print(table({name: summarise(rs) for name, rs in rounds.items()}, args.rate, args.seconds))


if __name__ == "__main__":
    main()
