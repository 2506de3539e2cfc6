"""The fault table's two columns from one run: a GlobalStore and Kafka Streams' globalTable
(streams-peer/, GlobalTableFollow) follow the same topic of a 3-node local cluster, each
through Toxiproxy (tests/proxied_cluster.py), while a writer produces to the nodes directly
and reader threads query each, through the same faults at the same moment:

- partition: every node unreachable for --partition-s (nothing passes, nothing closes);
- leader kill: the leader of partition 0 killed with SIGKILL, started again after 5 s.

For each fault and follower it prints: reads during the fault and how many failed, the
slowest read, what the follower said (GlobalStore: `connected` and `last_error`; Kafka
Streams: its state), the seconds after the fault ended until the follower held the
writer's last record (the key "seq" carries the writer's counter), and whether its content
then equals the topic read independently.

    .venv/bin/python benchmarks/bench_faults_peer.py [--partition-s 60]

Needs Java 17+ and mvn on the PATH (the peer is built from streams-peer/pom.xml).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peers import STREAMS_PEER, build_streams_peer

from globalstore import GlobalStore
from tests.integration.store_support import produce, topic_content
from tests.proxied_cluster import ProxiedCluster, proxied_cluster

KEYS = 5_000
READERS = 2  # per follower: 2 cores are shared by three brokers, two followers and a writer
CATCH_UP_LIMIT_S = 300.0


@dataclass
class Writer:
    """A batch of 200 random keys, then "seq" = the batch's number, every 0.2 s."""

    bootstrap: str
    topic: str
    seq: int = 0  # the last batch acknowledged
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        rng = random.Random(7)
        while not self.stop.wait(0.2):
            batch = [(f"k{rng.randrange(KEYS):05d}", {"n": rng.random()}) for _ in range(200)]
            produce(self.bootstrap, self.topic, [*batch, ("seq", self.seq + 1)])
            self.seq += 1


@dataclass
class Sample:
    at: float  # monotonic
    seq: int
    reads: int
    failed: int
    slowest_ms: float
    said: str  # connected/last_error, or the Streams state


class StoreSide:
    """The GlobalStore, its reader threads and a sampler of its status every 0.5 s."""

    name = "globalstore"

    def __init__(self, cluster: ProxiedCluster, topic: str, path: Path) -> None:
        self.store = GlobalStore(topic, cluster.bootstrap, path, max_staleness=5.0)
        self.store.start(timeout=300)
        self.reads = self.failed = 0
        self.slowest_s = 0.0
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(READERS)]
        self.threads.append(threading.Thread(target=self._sample, daemon=True))
        for thread in self.threads:
            thread.start()

    def _read(self) -> None:
        rng = random.Random()
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.store.get(f"k{rng.randrange(KEYS):05d}")
            except Exception:  # any failed read is a finding, counted
                self.failed += 1
            self.slowest_s = max(self.slowest_s, time.monotonic() - began)
            self.reads += 1

    def _sample(self) -> None:
        while not self.stop.wait(0.5):
            status = self.store.status()
            said = "connected" if status.connected else f"not connected: {status.last_error}"
            seq = self.store.get("seq") or 0
            sample = Sample(time.monotonic(), int(seq), self.reads, self.failed,
                            self.slowest_s * 1000, said)  # fmt: skip
            self.samples.append(sample)

    def content(self) -> dict[str, Any]:
        return dict(self.store.items())

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        self.store.close()


class StreamsSide:
    """The Kafka Streams peer in its own JVM; its status lines are the samples."""

    name = "kafka streams"

    def __init__(self, java: list[str], cluster: ProxiedCluster, topic: str, state: Path):
        command = [*java, cluster.bootstrap, topic, str(state), str(READERS), str(KEYS)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.samples: list[Sample] = []
        self.dumped: list[str] = []
        self.dump_done = threading.Event()
        self.reader = threading.Thread(target=self._follow_output, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 300
        while not self.samples:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Kafka Streams peer did not reach RUNNING")
            time.sleep(0.2)

    def _follow_output(self) -> None:
        assert self.process.stdout is not None
        dumping = False
        for line in self.process.stdout:
            if line.startswith("{") and not dumping:
                found = json.loads(line)
                said = f"{found['state']} {found['error']}".strip()
                self.samples.append(Sample(time.monotonic(), int(found["seq"] or 0),
                                           found["reads"], found["failed"],
                                           found["slowest_ms"], said))  # fmt: skip
            elif line.strip() == "end":
                dumping = False
                self.dump_done.set()
            else:
                dumping = True
                self.dumped.append(line.rstrip("\n"))

    def content(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.dumped.clear()
        self.dump_done.clear()
        self.process.stdin.write("dump\n")
        self.process.stdin.flush()
        if not self.dump_done.wait(120):
            raise RuntimeError("the Kafka Streams peer did not dump its store")
        return {key: json.loads(value) for key, value in (d.split("\t", 1) for d in self.dumped)}

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("stop\n")
        self.process.stdin.flush()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


Side = StoreSide | StreamsSide


def wait_for_seq(side: Side, seq: int, since: float) -> float:
    """Seconds from `since` until `side` held seq >= `seq` (by its samples)."""
    deadline = time.monotonic() + CATCH_UP_LIMIT_S
    while time.monotonic() < deadline:
        held = [s.at for s in side.samples if s.seq >= seq and s.at >= since]
        if held:
            return held[0] - since
        time.sleep(0.2)
    return float("inf")


def describe(side: Side, began: float, ended: float, caught_up_s: float) -> str:
    during = [s for s in side.samples if began <= s.at <= ended]
    if not during:
        return f"{side.name}: no sample during the fault"
    first, last = during[0], during[-1]
    # What it said: each change of its state word (connected / not / RUNNING ...), with
    # when; then the last detail it gave (an error's text) once.
    changes: list[tuple[float, str]] = []
    for sample in during:
        word = sample.said.split(":")[0]
        if not changes or changes[-1][1] != word:
            changes.append((sample.at - began, word))
    details = [s.said for s in during if ":" in s.said]
    said = ", ".join(f"{word} at {t:.1f} s" for t, word in changes)
    if details:
        said += f" (last: {details[-1][:240]})"
    return (
        f"{side.name}: {last.reads - first.reads:,} reads during the fault, "
        f"{last.failed - first.failed} failed, slowest so far {last.slowest_ms:.0f} ms; "
        f"said: {said}; held the writer's last record {caught_up_s:.1f} s after the fault"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partition-s", type=float, default=15.0)
    args = parser.parse_args()
    print(f"building the peer in {STREAMS_PEER} ...", file=sys.stderr)
    java = build_streams_peer("globalstore.bench.GlobalTableFollow")
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as scratch_dir:
        scratch = Path(scratch_dir)
        with proxied_cluster(scratch) as cluster:
            run(cluster, java, scratch, args.partition_s)


def run(cluster: ProxiedCluster, java: list[str], scratch: Path, partition_s: float) -> None:
    topic = cluster.create_topic(partitions=3)
    writer = Writer(cluster.direct, topic)
    writing = threading.Thread(target=writer.run)
    writing.start()
    sides: list[Side] = []
    try:
        sides.append(StoreSide(cluster, topic, scratch / "store"))
        sides.append(StreamsSide(java, cluster, topic, scratch / "streams"))
        time.sleep(5)

        began = time.monotonic()
        cluster.cut()
        time.sleep(partition_s)
        seq = writer.seq
        cluster.heal()
        ended = time.monotonic()
        print(f"\npartition, {partition_s:.0f} s, writer at {seq}:")
        for side in sides:
            print("  " + describe(side, began, ended, wait_for_seq(side, seq, ended)))

        time.sleep(5)
        leader = cluster.kafka.leader_of(topic, 0)
        began = time.monotonic()
        cluster.kafka.stop_node(leader, signal.SIGKILL)
        time.sleep(5)
        cluster.kafka.start_node(leader)
        seq = writer.seq
        ended = time.monotonic()
        print(f"\nleader of partition 0 (node {leader}) killed, back after 5 s, writer at {seq}:")
        for side in sides:
            print("  " + describe(side, began, ended, wait_for_seq(side, seq, ended)))

        writer.stop.set()
        writing.join(60)
        expected = topic_content(cluster.direct, topic)
        print(f"\nafter the writer stopped at {writer.seq} ({len(expected):,} keys):")
        for side in sides:
            wait_for_seq(side, writer.seq, 0.0)
            print(f"  {side.name}: equal to the topic: {side.content() == expected}")
    finally:
        writer.stop.set()
        writing.join(60)
        for side in sides:
            side.close()


if __name__ == "__main__":
    main()
