"""kill -9 at any instant, then restart -> the store equals the topic's compacted content.

A child process (crash_follower.py) restores and follows a 4-partition topic while a thread
here keeps producing overwrites and tombstones. The test SIGKILLs the child many times at
random moments: some mid-restore (after a fresh wipe, within 0.5 s of the first batch being
written, so partial data is on disk; the child pauses after each small restore batch, so its
restore lasts seconds on any machine and such a kill always lands inside it), some while
following, some at any moment after launch.

After each kill the store directory is opened OFFLINE, with the storage layer itself
(globalstore.storage.Storage: lock + RocksDB open, no Kafka consumer, no restore), and its
data and stored offsets are read together. Nothing writes while they are read (the only
writer is dead), so this is an exact snapshot of what the crash left on disk — a started
store would first catch up and hide a bad crash state. The snapshot must equal the topic's
content folded up to the stored offsets: for each partition p, records [0, offset[p]) read
with a plain confluent-kafka consumer, latest value per key, tombstones deleting. Equality
proves that the offsets never run ahead of the data (missing keys) and that the data never
runs ahead of the offsets. Where the stored key count is known it must match too.

The topic is compacted, but min.compaction.lag.ms keeps the log cleaner from touching it
during the test, so offsets [0, n) are exactly the records produced (an oracle that stays
valid for any prefix). Finally the producer stops, the store is started normally (public
API) and must equal the whole topic's compacted content at the topic's end offsets.

Set CRASH_SEED to replay a run; the seed is printed.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from globalstore import GlobalStore
from globalstore.codec import HEADER_SIZE, encode_key, encode_value, format_headers, origin
from globalstore.follow.topic import end_offsets
from globalstore.storage import Storage
from globalstore.storage.meta import I64, offset_key
from tests.integration.store_support import produce, producer

PARTITIONS = 4
KEYS = 20_000
PRELOAD = 150_000  # enough that a full restore takes a while, so kills can land inside it
RATE = 3_000  # records/s produced while the child runs
# The child restores at most RESTORE_BATCH records per batch and pauses RESTORE_PAUSE s after
# each: a full restore then lasts at least PRELOAD / RESTORE_BATCH * RESTORE_PAUSE = 3.75 s on
# any machine, well beyond MID_RESTORE_KILL_WITHIN after its first batch.
RESTORE_BATCH = 2_000
RESTORE_PAUSE = 0.05
MID_RESTORE_KILL_WITHIN = 0.5
ROUNDS = 18
CHILD = Path(__file__).with_name("crash_follower.py")
REPO = Path(__file__).resolve().parents[2]

Folded = dict[bytes, tuple[bytes, int, int]]  # key -> (value bytes, partition, offset)


def record(rng: random.Random, seq: int) -> tuple[str, dict[str, object] | None]:
    key = f"k{rng.randrange(KEYS):05d}"
    if rng.random() < 0.15:
        return key, None
    return key, {"key": key, "seq": seq, "pad": "p" * rng.randrange(10, 120)}


class Writer(threading.Thread):
    """Overwrites and tombstones at about RATE records/s until stopped."""

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rng = bootstrap, topic, random.Random(seed)
        self.stop_event = threading.Event()
        self.sent = 0
        self.failure: BaseException | None = None  # raised by finish(), in the test's thread
        self.unacknowledged: int | None = None

    def run(self) -> None:
        try:
            p, headers = producer(self.bootstrap, **{"linger.ms": 5}), format_headers()
            began = time.monotonic()
            while not self.stop_event.is_set():
                for _ in range(50):
                    key, value = record(self.rng, PRELOAD + self.sent)
                    p.produce(self.topic, key=encode_key(key), value=encode_value(value),
                              headers=headers)  # fmt: skip
                    self.sent += 1
                p.poll(0)
                ahead = self.sent / RATE - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
            self.unacknowledged = p.flush(30)
        except BaseException as exc:
            self.failure = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)

    def check(self) -> None:
        """After stop(): fail the test if producing failed or left records unacknowledged."""
        assert not self.is_alive(), "the writer did not stop within 60 s"
        if self.failure is not None:
            raise AssertionError("the writer thread failed") from self.failure
        assert self.unacknowledged == 0, f"{self.unacknowledged} records left unacknowledged"


class TopicLog:
    """An independent plain-consumer copy of every record, per partition, in offset order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-oracle",
                                  "enable.auto.commit": False})  # fmt: skip
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {
            p: [] for p in range(PARTITIONS)
        }

    def read_up_to(self, offsets: dict[int, int], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while any(len(self.records[p]) < o for p, o in offsets.items()):
            assert time.monotonic() < deadline, "the oracle consumer fell behind"
            for m in self.consumer.consume(10_000, 0.2):
                assert m.error() is None, m.error()
                log = self.records[m.partition()]
                assert m.offset() == len(log), "offsets are not contiguous: the oracle is wrong"
                log.append((m.key(), m.value()))

    def fold(self, offsets: dict[int, int]) -> Folded:
        """Latest value per key over records [0, offsets[p]) of each partition."""
        self.read_up_to(offsets)
        out: Folded = {}
        for p in range(PARTITIONS):
            for o, (key, value) in enumerate(self.records[p][: offsets.get(p, 0)]):
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = (value, p, o)
        return out


@contextmanager
def warnings_logged() -> Iterator[list[str]]:
    """Collect WARNING+ from globalstore: a wipe on open would silently 'pass' the check."""
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda r: seen.append(r.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("globalstore")
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


def check_offline(path: Path, oracle: TopicLog) -> tuple[dict[int, int], int]:
    """Compare what a crash left on disk with the topic folded up to the stored offsets."""
    with warnings_logged() as warned:
        storage = Storage(path)
        try:
            meta = storage.read_meta()
            data = dict(storage.scan(None, None, False))
        finally:
            storage.close()
    assert warned == [], f"opening the crashed store logged warnings: {warned}"
    expected = oracle.fold(meta.offsets)
    missing = expected.keys() - data.keys()
    extra = data.keys() - expected.keys()
    assert not missing and not extra, (
        f"at stored offsets {meta.offsets}: {len(missing)} keys missing "
        f"(e.g. {sorted(missing)[:3]}), {len(extra)} extra (e.g. {sorted(extra)[:3]})"
    )
    for key, (value, p, o) in expected.items():
        raw = data[key]
        assert raw[HEADER_SIZE:] == value and origin(raw)[1:] == (p, o), (
            f"key {key!r}: store has {origin(raw)[1:]} {raw[HEADER_SIZE:]!r}, "
            f"topic has ({p}, {o}) {value!r} at stored offsets {meta.offsets}"
        )
    if meta.count is not None:
        assert meta.count == len(data), f"stored count {meta.count} != {len(data)} keys"
    return meta.offsets, len(data)


class Child:
    """crash_follower.py in its own process; its phase lines are collected by a thread."""

    def __init__(self, bootstrap: str, topic: str, path: Path, stderr: Path, *extra: str) -> None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
        )
        self.stderr = stderr
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), bootstrap, topic, str(path), str(RESTORE_BATCH),
             str(RESTORE_PAUSE), *extra],
            stdout=subprocess.PIPE, stderr=stderr.open("wb"), text=True, env=env,
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.split()[0])

    def wait_for(self, phase: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while phase not in self.lines:
            assert self.proc.poll() is None, f"child exited: {self.stderr.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"child never reached {phase}: {self.lines}"
            time.sleep(0.005)

    def kill(self) -> str:
        """SIGKILL it (it must still be alive) and say which phase it was in."""
        assert self.proc.poll() is None, f"child died on its own: {self.stderr.read_text()[-2000:]}"
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL
        self.reader.join(5)
        if "following" in self.lines:
            return "follow"
        if "batch" in self.lines and "restored" not in self.lines:
            return "mid-restore"
        return "restore" if "restoring" in self.lines else "opening"


def test_kill_9_at_random_moments(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.randrange(2**32)))
    print(f"CRASH_SEED={seed}")
    rng = random.Random(seed)
    topic = make_topic(partitions=PARTITIONS, config={"min.compaction.lag.ms": "3600000"})
    produce(kafka_bootstrap, topic, (record(rng, i) for i in range(PRELOAD)))
    oracle = TopicLog(kafka_bootstrap, topic)
    path = tmp_path / "store"
    writer = Writer(kafka_bootstrap, topic, seed + 1)
    writer.start()
    kills: dict[str, int] = {}
    try:
        for n in range(ROUNDS):
            # The first two rounds make sure both phases are hit; the rest is chance.
            mode = ("restore", "follow")[n] if n < 2 else rng.choice(["restore", "follow", "any"])
            if mode == "restore":
                shutil.rmtree(path, ignore_errors=True)  # a full (bulk) restore from offset 0
            child = Child(kafka_bootstrap, topic, path, tmp_path / f"child-{n}.err")
            if mode == "restore":
                child.wait_for("batch")  # partial data is on disk now
                time.sleep(rng.uniform(0.0, MID_RESTORE_KILL_WITHIN))
            else:
                if mode == "follow":
                    child.wait_for("following", timeout=120)
                time.sleep(rng.uniform(0.05, 1.5))
            phase = child.kill()
            if mode == "restore":
                assert phase == "mid-restore", f"round {n}: a restore kill landed in {phase}"
            kills[phase] = kills.get(phase, 0) + 1
            offsets, keys = check_offline(path, oracle)
            print(f"round {n}: {mode:7} killed in {phase:11} -> {keys} keys at "
                  f"{sum(offsets.values())} offsets: consistent")  # fmt: skip
    finally:
        writer.stop()
    writer.check()
    print(f"kills by phase: {kills}, records produced while killing: {writer.sent}")
    assert kills.get("mid-restore", 0) >= 1 and kills.get("follow", 0) >= 1, kills

    # Full restart with the producer stopped: the store must equal the whole topic.
    ends = end_offsets(kafka_bootstrap, topic)
    expected = {k.decode(): orjson.loads(v) for k, (v, _, _) in oracle.fold(ends).items()}
    with GlobalStore(topic, kafka_bootstrap, path) as store:
        assert store.position() == ends
        assert store.count() == len(expected)
        assert dict(store.items()) == expected
    oracle.consumer.close()


def test_the_offline_check_catches_offsets_ahead_of_data(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    """The check above is not vacuous: a store whose offset claims one record it lacks fails."""
    topic = make_topic(partitions=PARTITIONS, config={"min.compaction.lag.ms": "3600000"})
    produce(kafka_bootstrap, topic, [(f"k{i}", {"i": i}) for i in range(40)], partition=1)
    path = tmp_path / "store"
    with GlobalStore(topic, kafka_bootstrap, path):
        pass
    oracle = TopicLog(kafka_bootstrap, topic)
    # Empty partitions were reached too: their end (0) is a position like any other.
    assert check_offline(path, oracle) == ({0: 0, 1: 40, 2: 0, 3: 0}, 40)

    produce(kafka_bootstrap, topic, [("late", {"i": 40})], partition=1)
    storage = Storage(path)
    storage.put_meta(offset_key(1), I64.pack(41))  # the offset moves on, the data does not
    storage.close()
    with pytest.raises(AssertionError, match="1 keys missing"):
        check_offline(path, oracle)
    oracle.consumer.close()
