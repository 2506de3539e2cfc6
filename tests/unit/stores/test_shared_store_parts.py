"""SharedStore against a writer made of its parts (a Storage and an Announcer), no broker:
it catches up in the querying thread, moves to the copy the writer calls live, and says when
the writer has gone quiet."""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from globalstore import SharedStore, State
from globalstore.follow.delays import BOUNDS, FollowedBatch
from globalstore.replicas.announce import (
    HEARTBEAT_S,
    WAKE_SOCKET,
    Announcer,
    WakeSocket,
    WriterNote,
    new_writer_id,
)
from globalstore.server import ServedStore, ServerSettings, create_app
from globalstore.storage import Storage
from tests.unit.server.test_probes import TestClient
from tests.unit.store_fakes import batch
from tests.waiting import eventually


@dataclass
class Writer:
    """What a GlobalStore does for its readers: write a batch, then wake them."""

    home: Path
    storage: Storage
    writer: str = field(default_factory=new_writer_id)
    live: str = "."
    state: str = "running"
    ahead: int = 0  # records the topic holds beyond what the writer applied, as it knows
    applied: tuple[FollowedBatch, ...] = ()  # the batches written, as a follower's note lists

    def __post_init__(self) -> None:
        self.storage.initialise("t", None, 0)
        self.announcer = Announcer(self.home, self.note)

    def note(self) -> WriterNote:
        positions = dict(self.storage.state.positions)
        high = {p: o + self.ahead for p, o in positions.items()}
        return WriterNote(self.writer, self.live, self.state, True, positions, high,
                          time.time(), self.applied)  # fmt: skip

    def write(
        self, *records: tuple[str, str | None], start: int, age: float = 0.0, wake: bool = True
    ) -> None:
        """Apply `records` (the oldest of them `age` seconds old) and wake the readers."""
        self.storage.apply(batch(*records, start=start), {}, True, 0)
        number = len(self.applied) + 1
        stamp = int((time.time() - age) * 1000)
        self.applied = (*self.applied, FollowedBatch(number, stamp, len(records)))
        if wake:
            self.announcer.wake()

    def close(self) -> None:
        self.announcer.close()
        self.storage.close()


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    writer = Writer(tmp_path, Storage(tmp_path))
    yield writer
    writer.close()


def test_a_query_catches_up_before_it_reads(writer: Writer) -> None:
    writer.write(("a", "1"), start=0)
    with SharedStore(writer.home).start(timeout=5) as shared:
        assert shared["a"] == 1
        shared.source.abort()  # no note thread: only the query itself can catch up
        writer.write(("a", "2"), ("b", "3"), start=1)
        assert shared["a"] == 2 and shared.get("b") == 3  # no waiting, no retry
        assert shared.position() == {0: 3}


def test_a_reader_moves_to_the_copy_the_writer_calls_live(writer: Writer) -> None:
    writer.write(("a", "1"), start=0)
    shared = SharedStore(writer.home).start(timeout=5)
    held = shared.items()  # a scan open on the first copy
    beside = Storage(writer.home / "rebuild")
    beside.initialise("t", None, 0)
    beside.apply(batch(("n", "9"), start=0), {}, True, 0)
    writer.storage, writer.live = beside, "rebuild"
    writer.announcer.wake()
    assert dict(held) == {"a": 1}  # the scan ends on the copy it began on
    eventually(lambda: shared.get("n") == 9, 5, lambda: "never moved to the rebuilt copy", 0.005)
    assert shared.get("a") is None and shared.status().path.endswith("rebuild")
    shared.close()
    beside.close()


def test_a_silent_writer_makes_the_reader_stale(
    writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer.write(("a", "1"), start=0)
    shared = SharedStore(writer.home).start(timeout=5)
    assert shared.status().ready and shared.status().staleness_seconds == 0.0
    monkeypatch.setattr("globalstore.stores.secondary.WRITER_SILENT_S", 0.05)
    writer.announcer.close()  # no farewell, no heartbeat: as a killed writer
    writer.announcer = Announcer(writer.home, lambda: None)  # for the fixture to close
    time.sleep(0.1)
    status = shared.status()
    assert status.state is State.OFFLINE and not status.ready
    assert "not been heard" in (status.last_error or "") and shared["a"] == 1
    shared.close()


def test_a_restarted_writer_that_is_restoring_leaves_readers_where_they_are(
    writer: Writer,
) -> None:
    writer.write(("a", "1"), start=0)
    shared = SharedStore(writer.home).start(timeout=5)
    writer.writer, writer.state = new_writer_id(), "restoring"
    original = writer.note
    writer.note = lambda: WriterNote(**{**original().__dict__, "ready": False})  # type: ignore[method-assign]
    writer.announcer.wake()
    time.sleep(0.1)
    assert shared["a"] == 1 and shared.status().state is State.RESTORING
    shared.close()


def test_a_writer_that_failed_fails_the_readers_liveness_probe(writer: Writer) -> None:
    writer.write(("a", "1"), start=0)
    shared = SharedStore(writer.home).start(timeout=5)
    app = create_app(ServedStore.of(shared), ServerSettings())
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/healthz").status_code == 200
        writer.state = "failed"  # what a GlobalStore whose thread stopped on an error says
        writer.announcer.wake()
        eventually(lambda: shared.status().failure is not None, 5, lambda: "never told")
        health = client.get("/healthz")
        assert shared["a"] == 1  # it still answers from the writer's last state
    assert health.status_code == 503
    assert health.json() == {"status": "failed", "error": "WriterFailed"}


def _forge(shared: SharedStore, **fields: object) -> None:
    """Send the reader a datagram of this user's (it passes the file modes): the writer's
    last note with `fields` changed, or raw bytes for fields={"raw": ...}."""
    note = shared.source._note
    assert note is not None and shared.source._wake is not None
    body = {**json.loads(note.encode()), **fields}
    data = body["raw"] if "raw" in body else json.dumps(body).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.sendto(data, str(shared.source._wake.directory / WAKE_SOCKET))


def test_forged_notes_leave_the_reader_on_its_copy_and_following(
    writer: Writer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # a store the sender would have served
    forged = Storage(elsewhere)
    forged.initialise("t", None, 0)
    forged.apply(batch(("a", "666"), start=0), {}, True, 0)
    forged.close()
    writer.write(("a", "1"), start=0)
    shared = SharedStore(writer.home).start(timeout=5)
    forgeries: list[dict[str, object]] = [
        {"live": str(elsewhere)},
        {"live": os.path.relpath(elsewhere, writer.home)},
        {"live": "..", "writer": "1-a"},
        {"state": "bogus"},
        {"positions": []},
        {"raw": b"[" * 5_000 + b"]" * 5_000},
    ]
    try:
        for count, fields in enumerate(forgeries, start=1):
            _forge(shared, **fields)
            _until_refused(shared, count)
            status = shared.status()  # never raises, whatever the note said
            assert status.state is State.RUNNING and status.path == str(writer.home), fields
            assert shared["a"] == 1, fields
        writer.write(("a", "2"), start=1)
        assert shared.wait_for({0: 2}, timeout=5)  # the note thread still follows
        assert (
            shared["a"] == 2
            and shared.source._thread is not None
            and shared.source._thread.is_alive()
        )
    finally:
        shared.close()


def _until_refused(shared: SharedStore, count: int) -> None:
    eventually(lambda: shared.status().refused_notes == count, 5, shared.status, 0.005)


def test_a_socket_that_fails_does_not_stop_the_reader_following(
    writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer.write(("a", "1"), start=0)
    shared = SharedStore(writer.home).start(timeout=5)
    receive, failed = WakeSocket.receive, threading.Event()

    def fails_once(self: WakeSocket, timeout: float) -> WriterNote | None:
        if not failed.is_set():
            failed.set()
            raise OSError(errno.ENOMEM, "no memory for the datagram")
        return receive(self, timeout)

    monkeypatch.setattr(WakeSocket, "receive", fails_once)
    try:
        assert failed.wait(5)
        writer.write(("a", "2"), start=1)
        assert shared.wait_for({0: 2}, timeout=5)
    finally:
        shared.close()


def test_a_reader_behind_longer_than_its_max_staleness_is_not_ready(writer: Writer) -> None:
    writer.write(("a", "1"), start=0)
    shared = SharedStore(writer.home, max_staleness=0.1).start(timeout=5)
    assert shared.status().ready and shared.status().fresh
    writer.ahead = 9  # the writer knows the topic went on to offset 10; it has applied 1
    writer.announcer.wake()
    eventually(lambda: shared.status().stale is not None, 5, shared.status)
    status = shared.status()
    assert status.state is State.RUNNING and not status.ready and not status.fresh
    assert "9 records behind" in (status.stale or "") and shared["a"] == 1
    shared.close()


def test_a_scan_holds_its_copy_while_the_writer_moves_twice(writer: Writer) -> None:
    """Two moves of the writer (a heal, a restart) while a scan is open: the scan reads its
    copy to the end, exact, and the reader moves on once it has ended."""
    first = {f"k{i:04d}": i for i in range(3000)}
    writer.write(*((k, str(v)) for k, v in first.items()), start=0)
    shared = SharedStore(writer.home).start(timeout=5)
    try:
        scan = shared.items()
        began = [next(scan) for _ in range(10)]
        copies = []
        for name in ("rebuild", "again"):
            copy = Storage(writer.home / name)
            copy.initialise("t", None, 0)
            copy.apply(batch((f"{name}-key", "1"), start=0), {}, True, 0)
            copies.append(copy)
            writer.storage, writer.live = copy, name
            writer.announcer.wake()
            eventually(lambda n=name: shared.get(f"{n}-key") == 1, 5, lambda: "no move", 0.005)
        assert dict(began + list(scan)) == first  # exact, on the copy it began on
        eventually(lambda: shared.status().path.endswith("again"), 5, lambda: "stuck", 0.005)
        assert shared.get("k0001") is None and shared.get("again-key") == 1
    finally:
        shared.close()
        for copy in copies:
            copy.close()


def _visible(shared: SharedStore) -> tuple[int, ...]:
    """Records counted per bucket of the reader's delay to visible."""
    delays = shared.status().visible_delays
    assert delays is not None and delays.bounds == BOUNDS  # the buckets of stage "applied"
    return delays.counts


def test_a_reader_counts_each_batch_once_at_its_delay_until_it_shows_it(writer: Writer) -> None:
    writer.write(("a", "0"), start=0, age=60.0)  # applied before the reader opened the copy
    with SharedStore(writer.home).start(timeout=5) as shared:
        assert sum(_visible(shared)) == 0  # so not counted: the reader's start is no delay
        writer.write(("a", "1"), start=1, age=0.0)
        eventually(lambda: sum(_visible(shared)) == 1, 5, lambda: _visible(shared))
        writer.write(("a", "2"), ("b", "3"), start=2, age=3.0)  # its oldest: 3 s old
        eventually(lambda: sum(_visible(shared)) == 3, 5, lambda: _visible(shared))
        time.sleep(2.5 * HEARTBEAT_S)  # heartbeats repeat the last batch: counted once
        counts = _visible(shared)
        assert sum(counts) == 3 and shared["b"] == 3
        # Two records in the bucket of 3 s (2.5 < d <= 5), one at a few milliseconds.
        assert counts[BOUNDS.index(5.0)] == 2 and sum(counts[: BOUNDS.index(1.0) + 1]) == 1
        delays = shared.status().visible_delays
        assert delays is not None and 6.0 <= delays.sum_seconds < 6.0 + 2 * 1.0


def test_a_batch_the_reader_does_not_show_yet_is_not_counted(writer: Writer) -> None:
    writer.write(("a", "1"), start=0)
    with SharedStore(writer.home).start(timeout=5) as shared:
        writer.write(("a", "2"), start=1)
        eventually(lambda: sum(_visible(shared)) == 1, 5, lambda: _visible(shared))
        # A note that says a batch up to offset 9 was applied, which the copy does not hold.
        _forge(shared, positions={"0": 9}, applied=[[7, int(time.time() * 1000), 8]])
        time.sleep(0.3)
        assert sum(_visible(shared)) == 1 and shared.status().refused_notes == 0


def test_batches_the_reader_hears_of_in_one_note_are_each_counted(writer: Writer) -> None:
    writer.write(("a", "1"), start=0)
    with SharedStore(writer.home).start(timeout=5) as shared:
        # Three batches, one note: as when a reader takes the newest of the notes queued.
        writer.write(("a", "2"), start=1, wake=False)
        writer.write(("b", "3"), ("c", "4"), start=2, wake=False)
        writer.write(("d", "5"), start=4)
        eventually(lambda: sum(_visible(shared)) == 4, 5, lambda: _visible(shared))
        time.sleep(2.5 * HEARTBEAT_S)
        assert sum(_visible(shared)) == 4  # and only once
