"""invalid_values="quarantine" on a real broker: 100k records, 1 % of them not JSON. A restore
killed with SIGKILL mid-way (crash_follower.py) and resumed holds exactly the records an
independent read of the topic says it must: each key whose latest record is bad keeps its
last good value and has that record quarantined. A later good record or tombstone of a
quarantined key takes it out; the CLI lists the same records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from globalstore import GlobalStore
from globalstore.cli import main
from globalstore.codec import encode_key, format_headers
from globalstore.follow.topic import end_offsets
from tests.integration.store_support import produce, producer

N = 100_000
# Each key written 3 or 4 times: 333 keys end on a bad record, and 667 bad records are
# followed by a good one for their key (which must take the key out of the quarantine).
KEYS = 33_333
BAD = b"not json {"
PARTITIONS = 4
REPO = Path(__file__).resolve().parents[2]


def _value(i: int) -> bytes:
    return BAD if i % 100 == 37 else orjson.dumps({"i": i})


def _produce(bootstrap: str, topic: str) -> None:
    p = producer(bootstrap)
    headers = format_headers()
    for i in range(N):
        while True:
            try:
                p.produce(
                    topic, key=encode_key(f"k{i % KEYS:05d}"), value=_value(i), headers=headers
                )
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0


def _independent_read(
    bootstrap: str, topic: str
) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """What the store must hold, read from the topic by a consumer of our own: {key: last
    good value} and {key: (partition, offset) of its latest record, where that is bad}."""
    ends = end_offsets(bootstrap, topic, 30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "q"})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    good: dict[str, Any] = {}
    bad: dict[str, tuple[int, int]] = {}
    left = sum(ends.values())
    while left:
        for m in consumer.consume(10_000, 1.0):
            assert m.error() is None, m.error()
            left -= 1
            key = m.key().decode()
            if m.value() is None:
                good.pop(key, None)
                bad.pop(key, None)
                continue
            try:
                good[key] = orjson.loads(m.value())
                bad.pop(key, None)
            except orjson.JSONDecodeError:
                bad[key] = (m.partition(), m.offset())
    consumer.close()
    return good, bad


def _kill_mid_restore(
    bootstrap: str, topic: str, path: Path, invalid_values: str = "quarantine"
) -> None:
    """crash_follower.py restoring with `invalid_values`, 5,000 records a batch and a pause
    after each, SIGKILLed after its fifth batch."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.crash_follower", bootstrap, topic, str(path),
         "5000", "0.05", "", "", "", invalid_values],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    batches = 0
    try:
        for line in child.stdout:
            assert not line.startswith(("restored", "following")), "the restore ended first"
            batches += line.startswith("batch")
            if batches == 5:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert batches == 5, "the child ended before its fifth batch"


def test_quarantine_holds_exactly_the_bad_records_after_a_kill_mid_restore(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    _produce(kafka_bootstrap, topic)
    good, bad = _independent_read(kafka_bootstrap, topic)
    assert 300 < len(bad) < 1_000  # the keys whose latest of their 1,000 bad records is last
    path = tmp_path / "s"
    _kill_mid_restore(kafka_bootstrap, topic, path)

    began = time.monotonic()
    with GlobalStore(topic, kafka_bootstrap, path, invalid_values="quarantine") as store:
        print(f"resumed restore: {time.monotonic() - began:.1f} s")
        held = store.quarantined()
        assert {q.key: (q.partition, q.offset) for q in held} == bad
        assert all(q.value == BAD and q.reason.startswith("not valid JSON") for q in held)
        assert store.status().quarantined == len(bad)
        assert dict(store.items()) == good  # a bad record never replaced a good value
        assert store.count() == len(good)

        # A good record and a tombstone for two quarantined keys; a bad one for a good key.
        fixed, deleted = sorted(bad)[:2]
        spoiled = next(k for k in sorted(good) if k not in bad)
        produce(kafka_bootstrap, topic, [(fixed, {"fixed": True}), (deleted, None)])
        p = producer(kafka_bootstrap)
        p.produce(topic, key=encode_key(spoiled), value=BAD, headers=format_headers())
        assert p.flush(30) == 0
        assert store.wait_for(end_offsets(kafka_bootstrap, topic, 30), 30)
        now = {q.key for q in store.quarantined()}
        assert now == (set(bad) - {fixed, deleted}) | {spoiled}
        assert store.get(fixed) == {"fixed": True} and store.get(deleted) is None
        assert store.get(spoiled) == good[spoiled]
        assert store.status().quarantined == len(now)

    for given in (["--invalid-values", "quarantine"], []):  # the store says it quarantines
        result = CliRunner().invoke(
            main,
            ["quarantine", "--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--path",
             str(path), *given],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        lines = [orjson.loads(line) for line in result.stdout.splitlines()]
        assert {line["key"] for line in lines} == now and lines[0]["value"] == BAD.decode()


def _counted(store: GlobalStore, timeout: float = 60) -> int | None:
    """status().undecodable once known (the pass after a bulk restore has ended); each value
    seen before it must be None."""
    deadline = time.monotonic() + timeout
    while (seen := store.status().undecodable) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return seen


def test_a_store_counts_exactly_the_bad_values_it_holds_after_a_kill_mid_restore(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    """invalid_values="store" (the default): the bad values are stored and counted; the
    count is exact after a SIGKILL mid-restore, across a restart, and while following."""
    topic = make_topic(partitions=PARTITIONS)
    _produce(kafka_bootstrap, topic)
    _good, bad = _independent_read(kafka_bootstrap, topic)
    path = tmp_path / "s"
    _kill_mid_restore(kafka_bootstrap, topic, path, "store")
    with GlobalStore(topic, kafka_bootstrap, path) as store:
        # A bulk restore: counted by the pass once ready; unknown (None) until then, never
        # another number.
        assert _counted(store) == len(bad)
    with GlobalStore(topic, kafka_bootstrap, path, native_restore=False) as store:
        assert store.status().undecodable == len(bad)  # kept across a restart
        fixed = sorted(bad)[0]
        produce(kafka_bootstrap, topic, [(fixed, {"fixed": True})])
        assert store.wait_for(end_offsets(kafka_bootstrap, topic, 30), 30)
        assert store.status().undecodable == len(bad) - 1
    result = CliRunner().invoke(
        main,
        ["status", "--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--path", str(path)],
    )
    assert result.exit_code == 0, result.output
    assert f"undecodable:    {len(bad) - 1:,} values" in result.stdout, result.stdout
