"""A store on a real full disk: a 12 MB tmpfs that the topic's values do not fit in.

Mounting needs root (CI runs as root). Without it these tests cannot make a real full disk
and are skipped; the unit tests still inject RocksDB's own ENOSPC error: into every write
of Storage (test_storage_failures.py), under a following store thread
(test_store_thread.py), and a store it stopped into the probes (test_serve_probes.py).
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from globalstore import GlobalStore, StorageError, StoreFailed
from globalstore.status import State
from tests.integration.serve_support import running_server, served_store, wait_ready
from tests.integration.store_support import produce
from tests.pipelines.kafka_read import compacted_json, end_offsets

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounting a small tmpfs needs root; the unit tests inject ENOSPC"
)

VALUE_BYTES = 20_000  # random, so neither Kafka's nor RocksDB's compression shrinks them


class SmallDisk:
    """A tmpfs of its own, so the store meets ENOSPC where the rest of the machine does not."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.store = mount / "store"
        _run("mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount))

    def grow(self) -> None:
        """Free space the way an operator would: a bigger disk under the same files."""
        _run("mount", "-o", "remount,size=64m", str(self.mount))


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    mount = tmp_path / "disk"
    mount.mkdir()
    small = SmallDisk(mount)
    try:
        yield small
    finally:
        _run("umount", "--lazy", str(mount))  # lazy: a failed test may leave a file open


def wipes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The store's WARNINGs about wiping or rebuilding: a full disk must never cause one."""
    return [m for m in caplog.messages if "wiping" in m or "rebuilding" in m]


def records(first: int, n: int) -> list[tuple[str, Any]]:
    return [
        (f"k{i:05d}", {"n": i, "blob": base64.b64encode(os.urandom(VALUE_BYTES * 3 // 4)).decode()})
        for i in range(first, first + n)
    ]


def assert_names_the_disk(message: str, disk: SmallDisk) -> None:
    assert "No space left on device" in message, message
    assert f"disk {disk.mount}: " in message and " MiB free of 12.0 MiB" in message, message
    assert str(disk.store) in message, message


def assert_exact(store: GlobalStore, bootstrap: str, topic: str) -> None:
    """The store holds what an independent plain consumer reads of the topic, no more."""
    expected = compacted_json(bootstrap, topic)
    assert store.position() == end_offsets(bootstrap, topic)
    assert store.count() == len(expected)
    assert dict(store.items()) == expected


# Exact: every batch through the write-ahead log, which fills the disk. Bulk: the C loop
# writes without it, and the disk fills when the memtables are flushed.
RESTORES = {"exact": 10**9, "bulk": 0}


@pytest.mark.parametrize("threshold", RESTORES.values(), ids=RESTORES.keys())
def test_a_cold_restore_that_cannot_fit_fails_fast_then_restores_once_space_returns(
    kafka_bootstrap: str,
    make_topic,
    disk: SmallDisk,
    caplog: pytest.LogCaptureFixture,
    threshold: int,
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, records(0, 1200))  # 24 MB of values for a 12 MB disk
    store = GlobalStore(topic, kafka_bootstrap, disk.store, bulk_restore_threshold=threshold)
    began = time.monotonic()
    with pytest.raises(StorageError) as raised:
        store.start(timeout=60)
    assert time.monotonic() - began < 20, "a restore that cannot fit must end within seconds"
    assert_names_the_disk(str(raised.value), disk)
    disk.grow()
    # A new store on the same path in this process: the failed start let go of everything.
    again = GlobalStore(topic, kafka_bootstrap, disk.store).start(timeout=60)
    try:
        assert_exact(again, kafka_bootstrap, topic)
    finally:
        again.close()
    assert wipes(caplog) == []


def test_a_disk_filled_while_following_keeps_reads_and_fails_the_probes(
    kafka_bootstrap: str, make_topic, disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=1)
    first = records(0, 50)  # 1 MB: fits
    produce(kafka_bootstrap, topic, first)
    served = served_store(topic, kafka_bootstrap, disk.store)
    store = served.store
    with running_server(served) as client:
        wait_ready(client)
        produced = len(first)
        while store.status().state is not State.FAILED:
            assert produced < 1000, f"20 MB followed on a 12 MB disk: {store.status()}"
            written = produce(kafka_bootstrap, topic, records(produced, 50))
            produced += 50
            with contextlib.suppress(StoreFailed):  # the follower stopped: the loop ends
                assert store.wait_for(written, timeout=60), "the follower fell behind"
        status = store.status()
        assert status.failure == "StorageError", status
        assert not status.connected and (status.staleness_seconds or 0) > 0, status
        assert_names_the_disk(status.last_error or "", disk)
        key, value = first[0]
        assert store[key] == value  # reads answer from what is stored
        assert client.get(f"/v1/keys/{key}").json()["value"] == value
        assert client.get("/readyz").status_code == 503
        health = client.get("/healthz")
        assert health.status_code == 503
        # Open without a token: the state and the error's type, never its message.
        assert health.json() == {"status": "failed", "error": "StorageError"}
        report = client.get("/v1/status").json()
        assert report["state"] == "failed" and report["failure"] == "StorageError", report
        assert_names_the_disk(report["last_error"], disk)
        assert 'globalstore_failed{error="StorageError"} 1.0' in client.get("/metrics").text
    disk.grow()
    again = GlobalStore(topic, kafka_bootstrap, disk.store).start(timeout=60)
    try:
        assert again.status().rebuild_reason is None  # resumed where it stopped
        assert_exact(again, kafka_bootstrap, topic)
    finally:
        again.close()
    assert wipes(caplog) == []
