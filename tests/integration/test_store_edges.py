"""Behaviour at the edges of a store's life, against a real broker: a transaction left open
on the topic, a quiet topic kept apart from a long absence, a start that times out against a
reachable broker, Ctrl-C during start, a wait woken by a position that only an aborted
transaction moved."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from globalstore import GlobalStore, StartTimeout, StoreConfig, end_offsets
from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.storage import Storage
from tests.integration.store_support import HeldRestore, produce, set_topic_config

WAIT = 30.0


def _open_transaction(bootstrap: str, topic: str, keys: list[str]) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    p.begin_transaction()
    for key in keys:
        p.produce(topic, key=encode_key(key), value=encode_value(1), headers=format_headers())
    p.flush(30)  # written to the log, not committed
    return p


def test_a_transaction_left_open_does_not_hold_start_back(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    # A read_committed consumer cannot read past an open transaction: the end a store can
    # reach is the last stable offset, not the high watermark.
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1), ("b", 2)])
    pending = _open_transaction(kafka_bootstrap, topic, ["in-flight-1", "in-flight-2"])
    try:
        with GlobalStore(topic, kafka_bootstrap, tmp_path / "s").start(timeout=WAIT) as store:
            assert dict(store.items()) == {"a": 1, "b": 2}
            pending.commit_transaction(30)
            assert store.wait_for(end_offsets(kafka_bootstrap, topic), timeout=WAIT)
            assert store.get("in-flight-2") == 1 and store.lag() == {0: 0}
    finally:
        pending.flush(1)


def test_a_quiet_topic_is_not_taken_for_a_long_absence(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, tmp_path: Path
) -> None:
    # Nothing is written for a while as the store runs: its in-sync heartbeat keeps the
    # clock, so a start under a retention shorter than that quiet stretch resumes.
    topic = make_topic(partitions=1)  # the broker's long default retention meanwhile
    produce(kafka_bootstrap, topic, [("a", 1)])
    config = StoreConfig(topic, kafka_bootstrap, tmp_path / "s", heartbeat_interval=0.2)
    with GlobalStore.from_config(config):
        time.sleep(12.0)  # the quiet stretch
    storage = Storage(tmp_path / "s", read_only=True)
    meta = storage.read_meta()
    storage.close()
    assert meta.in_sync_at_ms is not None and meta.applied_at_ms is not None, meta
    quiet_ms = meta.in_sync_at_ms - meta.applied_at_ms
    assert quiet_ms >= 11_000, meta  # the heartbeat marked the store in sync throughout
    # Counted from the last write, the store was away longer than this; counted from its
    # last heartbeat, some seconds, whatever the machine's speed.
    retention_ms = quiet_ms - 1_000
    set_topic_config(kafka_admin, topic, "delete.retention.ms", str(retention_ms))
    with GlobalStore.from_config(config) as store:
        assert store.status().rebuild_reason is None
    # Away from the topic for longer than the retention: rebuild.
    time.sleep(retention_ms / 1000 + 1.0)
    with GlobalStore.from_config(config) as store:
        reason = store.status().rebuild_reason
        assert reason is not None and "delete.retention.ms" in reason


def test_a_restore_that_outlasts_its_timeout_is_a_start_timeout(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(200)])
    stall = HeldRestore(0.5)  # every batch of 2 records held 0.5 s: a 50 s restore
    config = StoreConfig(topic, kafka_bootstrap, tmp_path / "s", restore_batch_size=2)
    store = GlobalStore.from_config(config, listeners=[stall])
    began = time.monotonic()
    with pytest.raises(StartTimeout, match="did not finish restoring") as raised:
        store.start(timeout=10)  # room for planning on a loaded machine, far below 50 s
    assert type(raised.value) is StartTimeout  # the broker answered: not BrokerUnavailable
    # It gave up near its timeout (plus one held batch and the shutdown), not after the
    # restore: generous for a loaded machine, far below the 50 s restore.
    assert time.monotonic() - began < 30
    Storage(tmp_path / "s").close()  # the directory was released


_SLOW_START = """
import signal, sys, time
from globalstore import GlobalStore, StoreConfig, StoreListener

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, and
# Python keeps it so; a Ctrl-C at a terminal meets Python's default handler, so restore it.
signal.signal(signal.SIGINT, signal.default_int_handler)

class Slow(StoreListener):  # 100 batches of 10 records, 0.2 s each: far from ready for 20 s
    def on_batch_restored(self, topic, positions, records):
        print("restoring", flush=True)
        time.sleep(0.2)

config = StoreConfig(sys.argv[1], sys.argv[2], sys.argv[3], restore_batch_size=10)
try:
    GlobalStore.from_config(config, listeners=[Slow()]).start(timeout=120)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""


def test_ctrl_c_during_start_releases_the_store(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(1000)])
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_START, topic, kafka_bootstrap, str(tmp_path / "s")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "restoring"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=WAIT)
    finally:
        child.kill()
    assert "interrupted" in out and child.returncode != 0
    Storage(tmp_path / "s").close()  # nothing holds the directory any more


def test_a_wait_wakes_when_only_an_aborted_transaction_moves_the_position(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    # Aborted records and their marker hold nothing to apply, yet the position moves past
    # them: a caller waiting for that position must wake then, not at its timeout.
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s").start(timeout=WAIT) as store:
        aborted = _open_transaction(kafka_bootstrap, topic, ["never-1", "never-2"])
        wanted = {0: 4}  # past "a", the two aborted records and the abort marker
        woken: list[float] = []
        waiting = threading.Thread(
            target=lambda: woken.append(_waited(lambda: store.wait_for(wanted, timeout=WAIT)))
        )
        waiting.start()
        time.sleep(0.5)  # waiting before the position moves
        aborted.abort_transaction(30)
        waiting.join()
        assert woken and woken[0] < WAIT / 2, woken  # woken, not timed out
        assert store.position() == wanted and dict(store.items()) == {"a": 1}


def _waited(wait: Callable[[], bool]) -> float:
    """Seconds `wait()` took; AssertionError if it returned False."""
    began = time.monotonic()
    assert wait()
    return time.monotonic() - began
