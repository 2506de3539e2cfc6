"""The change feed of a GlobalStore on a real broker: every change of a known stream arrives
exactly once, in offset order per partition, to `for` and `async for` consumers and over
GET /v1/changes alike; a consumer that falls behind gets one Resync and never a silent gap;
closing ends it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from globalstore import Change, ChangeFeed, GlobalStore, Resync, SharedStore
from globalstore.aio import AsyncGlobalStore
from globalstore.read.protocols import reaches
from globalstore.server import ServerSettings
from tests.integration.change_support import Sent, check_exactly, ends, produce_known, stream
from tests.integration.serve_support import (
    running_server,
    served_store,
    serving_process,
    wait_every_worker_ready,
    wait_ready,
)
from tests.integration.test_shared_store import follow_process


def _until(
    feed: ChangeFeed, store: GlobalStore, wanted: Callable[[], Mapping[int, int] | bool]
) -> list[Change]:
    """The changes taken from `feed` until the store has applied `wanted()` (False: not
    known yet) and the feed is empty."""
    got: list[Change] = []
    reached = False
    while True:
        item = feed.get(timeout=0.2 if reached else 0.5)
        if item is None:
            if reached:
                return got  # applied, and nothing more came
            target = wanted()
            reached = target is not False and reaches(store.position(), target)
            continue
        assert isinstance(item, Change), item
        got.append(item)


def test_every_change_arrives_once_in_order_sync_and_async(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    produce_known(kafka_bootstrap, topic, stream(100))  # restored, not in the feed
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        starts = store.position()
        sync_feed, async_feed = store.changes(), store.changes()
        some = store.changes(prefix="k1", keys=["k1", "k10", "k2"])
        async_got: list[Change] = []

        async def consume() -> None:
            async with async_feed:
                async for item in async_feed:
                    assert isinstance(item, Change), item
                    async_got.append(item)

        runner = threading.Thread(target=asyncio.run, args=(consume(),))
        runner.start()
        sent = produce_known(kafka_bootstrap, topic, stream(3_000))
        with sync_feed:
            check_exactly(_until(sync_feed, store, lambda: ends(sent)), sent, starts)
        with some:
            wanted = {w: kv for w, kv in sent.items() if kv[0] in ("k1", "k10")}
            check_exactly(_until(some, store, lambda: ends(sent)), wanted, starts)
    runner.join(10)  # the store's close ends the async feed
    assert not runner.is_alive()
    check_exactly(async_got, sent, starts)


def test_a_slow_consumer_gets_one_resync_and_no_silent_gap(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    # Follow batches of at most 100 records: the buffer of 300 overflows on the 4th or so.
    small = {"follow_batch_size": 50, "follow_batch_max": 100}
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", **small) as store, store.changes(
        buffer=300
    ) as feed:  # fmt: skip
        starts = store.position()
        first = produce_known(kafka_bootstrap, topic, stream(1_000))
        assert store.wait_for(ends(first), timeout=30)
        before: list[Change] = []
        item = feed.get(timeout=5)
        while isinstance(item, Change):
            before.append(item)
            item = feed.get(timeout=5)
        assert isinstance(item, Resync), item
        assert "300" in item.reason
        # What came before the resync is a gapless start of the stream in each partition.
        assert len(before) <= 300
        for change in before:
            assert first[(change.partition, change.offset)] == (change.key, change.value)
            earlier = [c.offset for c in before if c.partition == change.partition]
            assert earlier == list(range(starts.get(change.partition, 0), max(earlier) + 1))
        # After the resync the consumer re-reads, and every change from then on arrives.
        resynced = store.position()
        second: list[Sent] = []
        # Fewer than the buffer holds: however little of the GIL the consumer gets on a busy
        # machine, nothing overflows (500 here resynced again once, beside a broker container).
        producing = threading.Thread(
            target=lambda: second.append(produce_known(kafka_bootstrap, topic, stream(250)))
        )
        producing.start()  # while the consumer reads
        got = _until(feed, store, lambda: not producing.is_alive() and ends(second[0]))
        check_exactly(got, second[0], resynced)
        assert feed.get(timeout=0.2) is None  # one resync, not one per batch
    assert list(feed) == []  # closed: iteration ends


def _events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """(event, data) of a server-sent event stream; ("comment", text) for a comment line."""
    name, data = "message", ""
    for line in lines:
        if line.startswith(":"):
            yield "comment", line[1:].strip()
        elif line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
        elif not line and data:
            yield name, json.loads(data)
            name, data = "message", ""


def test_server_sent_events_carry_every_change_under_the_token_and_the_cap(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    settings = ServerSettings(token="tok", max_change_streams=1, keepalive=0.5)
    auth = {"Authorization": "Bearer tok"}
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        assert client.get("/v1/changes").status_code == 401
        after = ends(produce_known(kafka_bootstrap, topic, stream(20)))
        spec = ",".join(f"{p}:{o}" for p, o in after.items())
        query = {"min_position": spec, "prefix": "k"}
        with client.stream("GET", "/v1/changes", headers=auth, params=query) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = _events(response.iter_lines())
            name, start = next(events)
            starts = {int(p): o for p, o in start["position"].items()}
            assert name == "start" and reaches(starts, after), start
            busy = client.get("/v1/changes", headers=auth, params={"wait": "0"})
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
            sent = produce_known(kafka_bootstrap, topic, stream(2_000))
            changes = _event_changes(events, sent)
            assert next(events) == ("comment", "keepalive")  # idle now
            check_exactly(changes, sent, starts)


def _event_changes(events: Iterator[tuple[str, Any]], sent: Sent) -> list[Change]:
    """The changes of an event stream up to the last record of `sent` (keepalives between)."""
    changes: list[Change] = []
    while not reaches({c.partition: c.offset + 1 for c in changes}, ends(sent)):
        name, data = next(events)
        if name != "comment":  # a keepalive while the records were produced
            assert name == "change", (name, data)
            changes.append(Change(**data))
    return changes


@pytest.mark.parametrize("workers", [0, 2])
def test_serve_streams_changes_and_ends_the_streams_when_it_stops(
    kafka_bootstrap: str, make_topic, tmp_path: Path, workers: int
) -> None:
    """With --workers, a worker reads the store as a SharedStore, and its change feed reads
    the topic with the Kafka settings serve was given (the file read again by each worker).
    Either way SIGTERM ends open streams at once, not after --graceful-seconds."""
    topic = make_topic(partitions=2)
    produce_known(kafka_bootstrap, topic, stream(20))
    settings_file = tmp_path / "kafka.properties"
    settings_file.write_text("client.id=globalstore-serve-test\n")
    command = [str(Path(sys.executable).parent / "globalstore"), "serve", "--topic", topic]
    command += ["--bootstrap-servers", kafka_bootstrap, "--path", str(tmp_path / "s")]
    command += ["--workers", str(workers), "--kafka-config-file", str(settings_file)]
    command += ["--graceful-seconds", "60"]
    server, base = serving_process(command, dict(os.environ, GLOBALSTORE_TOKEN="tok"))
    auth = {"Authorization": "Bearer tok"}
    try:
        wait_every_worker_ready(base)
        for _ in range(4):  # a new connection each: the workers take turns accepting
            with httpx.Client(base_url=base, timeout=30, headers=auth) as client, client.stream(
                "GET", "/v1/changes"
            ) as response:  # fmt: skip
                assert response.status_code == 200, response.read()
                events = _events(response.iter_lines())
                starts = _started(events)
                sent = produce_known(kafka_bootstrap, topic, stream(200))
                check_exactly(_event_changes(events, sent), sent, starts)
        with httpx.Client(base_url=base, timeout=30, headers=auth) as client, client.stream(
            "GET", "/v1/changes"
        ) as response:  # fmt: skip
            events = _events(response.iter_lines())
            _started(events)
            server.send_signal(signal.SIGTERM)
            stopping = time.monotonic()
            assert all(name == "comment" for name, _ in events)  # then the stream ends
            code = server.wait(30)
            assert time.monotonic() - stopping < 10  # not the 60 graceful seconds
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(90)
    errors = server.stderr.read()  # type: ignore[union-attr]
    # One process ends as SIGTERM asks once it has shut down (uvicorn raises it again).
    assert code == (0 if workers else -signal.SIGTERM) and "Traceback" not in errors, errors


def _started(events: Iterator[tuple[str, Any]]) -> dict[int, int]:
    """The position of an event stream's start event."""
    name, start = next(events)
    assert name == "start", (name, start)
    return {int(p): o for p, o in start["position"].items()}


def _taken(feed: ChangeFeed, reader: SharedStore, wanted: Mapping[int, int]) -> list[object]:
    """Every item (changes and resyncs) until the reader shows `wanted` and the feed is
    quiet."""
    got: list[object] = []
    reached = False
    while True:
        item = feed.get(timeout=0.3 if reached else 0.5)
        if item is not None:
            got.append(item)
        elif reached:
            return got  # shown, and nothing more came
        else:
            reached = reaches(reader.position(), wanted)


def test_a_shared_store_feed_through_a_writer_killed_and_restarted(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic, path = make_topic(partitions=2), tmp_path / "store"
    produce_known(kafka_bootstrap, topic, stream(50))
    writer = follow_process(kafka_bootstrap, topic, path)
    reader = SharedStore(path, bootstrap_servers=kafka_bootstrap)
    try:
        reader.start(timeout=60)
        with reader.changes() as feed:
            starts = reader.position()
            sent = produce_known(kafka_bootstrap, topic, stream(1_000))
            got = _taken(feed, reader, ends(sent))
            check_exactly(got, sent, starts)  # type: ignore[arg-type]

            writer.send_signal(signal.SIGKILL)
            writer.wait(30)
            while_dead = produce_known(kafka_bootstrap, topic, stream(300))
            writer = follow_process(kafka_bootstrap, topic, path)
            got = _taken(feed, reader, ends(while_dead))
            # The reader moved to the restarted writer's copy: the feed says so, once, and
            # gives nothing its dead writer did not apply.
            assert len(got) == 1 and isinstance(got[0], Resync), got[:3]
            assert "another copy" in got[0].reason
            resynced = reader.position()
            after = produce_known(kafka_bootstrap, topic, stream(500))
            check_exactly(_taken(feed, reader, ends(after)), after, resynced)  # type: ignore[arg-type]
    finally:
        reader.close()
        writer.send_signal(signal.SIGTERM)
        writer.wait(30)


def test_an_async_store_hands_out_a_feed_read_with_async_for(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    """AsyncGlobalStore.changes(): every change once, in order, to `async for`, on a plain
    store whose C loop followed until the feed was opened."""
    topic = make_topic(partitions=2)
    produce_known(kafka_bootstrap, topic, stream(100))  # restored, not in the feed

    async def run() -> tuple[list[Change], Any, dict[int, int]]:
        async with AsyncGlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
            starts = store.position()
            feed = await store.changes()
            sent = produce_known(kafka_bootstrap, topic, stream(500))
            got: list[Change] = []
            async with feed:
                async for item in feed:
                    assert isinstance(item, Change), item
                    got.append(item)
                    if len(got) == len(sent):
                        break
            return got, sent, starts

    got, sent, starts = asyncio.run(asyncio.wait_for(run(), 60))
    check_exactly(got, sent, starts)
