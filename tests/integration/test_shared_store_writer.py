"""SharedStore.with_writer() on a real broker: the store starts its own writer process, answers
GlobalStore's queries from it, starts another when it dies, stops it on close(), and never
leaves it behind, however this process ends."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from globalstore import GlobalStore, SharedStore, StoreFailed
from globalstore.aio import AsyncSharedStore
from globalstore.stores.store import Store
from tests.integration.store_support import create_when_deleted, process_running, produce
from tests.unit.server.test_workers import children_of
from tests.waiting import eventually


def tagged(key: str, value: Any) -> Any:
    """A transform the writer process imports by name."""
    return {"tagged": value}


def _writers() -> set[int]:
    """This process's children that are writer processes."""
    return set(children_of(os.getpid(), b"writer_main"))


@pytest.mark.parametrize("spelling", ["follower='process'", "with_writer"])
def test_its_own_writer_restores_follows_and_stops_with_it(
    kafka_bootstrap: str, make_topic, tmp_path: Path, spelling: str
) -> None:
    topic = make_topic(partitions=3)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(500)])
    store: Store
    if spelling == "with_writer":
        store = SharedStore.with_writer(topic, kafka_bootstrap, tmp_path / "s", transform=tagged)
    else:
        store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", transform=tagged,
                            follower="process")  # fmt: skip
    assert _writers() == set()  # nothing runs before start()
    with store.start(timeout=60):
        assert store.count() == 500 and store.get("k7") == {"tagged": 7}
        (writer,) = _writers()
        written = produce(kafka_bootstrap, topic, [("k7", "new")])
        assert store.wait_for(written, timeout=30)
        assert store.get("k7") == {"tagged": "new"}
        assert store.status().ready and store.status().state == "running"
    assert not process_running(writer) and _writers() == set()


def test_a_writer_that_dies_is_started_again(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(100)])
    with SharedStore.with_writer(topic, kafka_bootstrap, tmp_path / "s").start(60) as store:
        (first,) = _writers()
        os.kill(first, signal.SIGKILL)
        written = produce(kafka_bootstrap, topic, [("k1", "after")])
        assert store.wait_for(written, timeout=60)  # another writer restored and followed
        assert store.get("k1") == "after"
        (second,) = _writers()
        assert second != first


def test_a_writer_that_cannot_start_fails_start_with_its_reason(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(compact=False)
    store = SharedStore.with_writer(topic, kafka_bootstrap, tmp_path / "s")
    began = time.monotonic()
    with pytest.raises(StoreFailed, match=r"ready: ERROR .*TopicNotCompacted: .*compact"):
        store.start(timeout=60)
    assert time.monotonic() - began < 30  # said at once, not after the timeout
    store.close()
    assert _writers() == set()


_PARENT = """
import sys, time
from globalstore import SharedStore
store = SharedStore.with_writer(sys.argv[1], sys.argv[2], sys.argv[3]).start(60)
print("ready", flush=True)
time.sleep(600)
"""


def test_the_writer_ends_with_a_killed_parent(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic()
    produce(kafka_bootstrap, topic, [("k", 1)])
    command = [sys.executable, "-c", _PARENT, topic, kafka_bootstrap, str(tmp_path / "s")]
    parent = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "ready\n"
        children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
        (writer,) = [int(pid) for pid in children]
        parent.kill()
        parent.wait()
        eventually(lambda: not process_running(writer), 30, lambda: f"writer {writer} still runs")
    finally:
        parent.kill()


def test_the_async_face_starts_and_stops_its_writer(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(50)])

    async def use() -> int:
        async with AsyncSharedStore.with_writer(topic, kafka_bootstrap, tmp_path / "s") as store:
            (writer,) = _writers()
            written = produce(kafka_bootstrap, topic, [("k3", "again")])
            assert await store.wait_for(written, timeout=30)
            assert store.get("k3") == "again" and await store.count() == 50
            return writer

    writer = asyncio.run(use())
    assert not process_running(writer) and _writers() == set()


def test_a_function_from_this_process_import_path_reaches_the_writer(
    kafka_bootstrap: str, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = make_topic()
    produce(kafka_bootstrap, topic, [("k", 1)])
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "writer_shapes.py").write_text(
        "def ten(key, value):\n    return 10 * value\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))  # on this process's path alone
    from writer_shapes import ten  # type: ignore[import-not-found]  # noqa: PLC0415

    with SharedStore.with_writer(topic, kafka_bootstrap, tmp_path / "s", transform=ten) as store:
        assert store.get("k") == 10


def test_a_writer_whose_store_fails_ends_and_another_is_started(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(20)])
    store = SharedStore.with_writer(topic, kafka_bootstrap, tmp_path / "s", out_of_range="stop")
    with store.start(timeout=60):
        (first,) = _writers()
        # Recreated under it, the topic's offsets fall below the store's: its thread stops.
        kafka_admin.delete_topics([topic])[topic].result(timeout=30)
        create_when_deleted(kafka_admin, topic)
        produce(kafka_bootstrap, topic, [("fresh", 1)])
        eventually(lambda: not process_running(first), 60, lambda: f"{first} still runs")
        eventually(lambda: len(_writers()) == 1, 60, lambda: "no writer started again")
        assert _writers() != {first}
        assert store.get("k3") == 3  # answers are the last state meanwhile
