"""How a writer wakes its reader processes (announce.py), with real Unix sockets."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from globalstore.follow.delays import FollowedBatch
from globalstore.replicas.announce import (
    ACCEPTS_APPLIED,
    BATCHES,
    HEARTBEAT_S,
    READERS,
    WAKE_SOCKET,
    Announcer,
    WakeSocket,
    WriterNote,
)

NOTE = WriterNote(
    writer="1-a", live=".", state="running", ready=True, positions={0: 5, 2: 7},
    high={0: 5, 2: 9}, sent_at=1.5,
)  # fmt: skip


class Notes:
    """The writer's note() with a counter: each call says one more record was applied."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> WriterNote:
        self.calls += 1
        return dataclasses.replace(NOTE, positions={0: self.calls})


def test_a_note_survives_the_wire() -> None:
    assert WriterNote.decode(NOTE.encode()) == NOTE


def test_a_registered_reader_is_woken_with_the_newest_note(tmp_path: Path) -> None:
    notes = Notes()
    announcer = Announcer(tmp_path, notes)
    announcer.wake()
    assert notes.calls == 0  # no reader: nothing built, nothing sent
    reader = WakeSocket(tmp_path, "r1")
    announcer.relist()  # as the heartbeat does every beat
    try:
        for _ in range(3):
            announcer.wake()
        assert reader.receive(1.0) == dataclasses.replace(NOTE, positions={0: 3})
        assert reader.receive(0.05) is None  # the older two were dropped with it
    finally:
        reader.close()
        announcer.close()
    assert not (tmp_path / READERS / "r1").exists()


def test_a_reader_that_died_is_removed(tmp_path: Path) -> None:
    announcer = Announcer(tmp_path, Notes())
    dead, alive = WakeSocket(tmp_path, "dead"), WakeSocket(tmp_path, "alive")
    dead._socket.close()  # as a killed process leaves it: the directory stays
    announcer.relist()
    try:
        announcer.wake()
        assert not dead.directory.exists()
        assert alive.receive(1.0) is not None
    finally:
        alive.close()
        announcer.close()


def test_a_path_too_long_for_a_socket_address_still_works(tmp_path: Path) -> None:
    store = tmp_path / ("deep-" * 25)
    assert len(str(store)) > 108
    announcer = Announcer(store, Notes())
    reader = WakeSocket(store, "r")
    announcer.relist()
    try:
        announcer.wake()
        assert reader.receive(1.0) is not None
    finally:
        reader.close()
        announcer.close(last=dataclasses.replace(NOTE, state="closed"))


def test_a_reader_that_registers_hears_from_the_heartbeat(tmp_path: Path) -> None:
    announcer = Announcer(tmp_path, Notes())
    reader = WakeSocket(tmp_path, "late")
    try:
        assert reader.receive(3 * HEARTBEAT_S) is not None  # no batch applied meanwhile
    finally:
        reader.close()
        announcer.close()


def test_a_reader_registered_before_the_writer_is_woken_at_once(tmp_path: Path) -> None:
    reader = WakeSocket(tmp_path, "early")
    announcer = Announcer(tmp_path, Notes())
    try:
        announcer.wake()
        assert reader.receive(HEARTBEAT_S / 2) is not None  # sooner than a heartbeat
    finally:
        reader.close()
        announcer.close()


def test_the_farewell_reaches_the_readers(tmp_path: Path) -> None:
    announcer = Announcer(tmp_path, Notes())
    reader = WakeSocket(tmp_path, "r")
    try:
        announcer.close(last=dataclasses.replace(NOTE, state="closed"))
        note = reader.receive(1.0)
        assert note is not None and note.state == "closed"
    finally:
        reader.close()


def test_two_readers_cannot_share_an_id(tmp_path: Path) -> None:
    reader = WakeSocket(tmp_path, "same")
    with pytest.raises(FileExistsError):
        WakeSocket(tmp_path, "same")
    reader.close()


def test_a_datagram_that_is_not_a_note_is_ignored(tmp_path: Path) -> None:
    reader = WakeSocket(tmp_path, "r")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stranger:
            stranger.sendto(b"not json", str(reader.directory / "wake.sock"))
        assert reader.receive(1.0) is None
    finally:
        reader.close()


def _sent(reader: WakeSocket, data: bytes) -> WriterNote | None:
    """What `reader` makes of `data` sent to its socket by this process."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.sendto(data, str(reader.directory / WAKE_SOCKET))
    return reader.receive(1.0)


def _forged(**fields: object) -> bytes:
    return json.dumps({**json.loads(NOTE.encode()), **fields}).encode()


FORGED = {
    "absolute live copy": _forged(live="/tmp/elsewhere"),
    "live copy above the store": _forged(live=".."),
    "live copy through ..": _forged(live="../elsewhere"),
    "live copy in a subdirectory": _forged(live="rebuild/db"),
    "empty live copy": _forged(live=""),
    "unknown state": _forged(state="bogus"),
    "writer id of text": _forged(writer="stopped; now trust me " * 1000),
    "ready as a string": _forged(ready="yes"),
    "positions as a list": _forged(positions=[]),
    "a negative offset": _forged(high={"0": -1}),
    "an offset past 2^63": _forged(positions={"0": 1 << 63}),
    "a boolean offset": _forged(positions={"0": True}),
    "a partition not a number": _forged(positions={" 1": 2}),
    "an infinite time": _forged(sent_at=1e999),
    "a field too many": _forged(extra=1),
    "applied not a list": _forged(applied={"number": 1}),
    "a batch not a list": _forged(applied=[1, 2, 3]),
    "a batch too short": _forged(applied=[[1, 2]]),
    "a batch with a string": _forged(applied=[[1, "2", 3]]),
    "a batch negative": _forged(applied=[[1, -5, 3]]),
    "a batch with a boolean": _forged(applied=[[True, 5, 3]]),
    "too many batches": _forged(applied=[[1, 2, 3]] * 257),
    "a field missing": json.dumps({"writer": "1-a"}).encode(),
    "not an object": b"[1, 2]",
    "nested too deep": b"[" * 5_000 + b"]" * 5_000,
    "not json": b"\xff\xfe",
}


# The fields a reader of a version before `applied` requires, exactly (its decoder refuses
# a note with any other set of keys).
OLDER_FIELDS = {"writer", "live", "state", "ready", "positions", "high", "sent_at"}
APPLIED = dataclasses.replace(
    NOTE, applied=(FollowedBatch(4, 1_700_000_000_000, 12), FollowedBatch(5, 1_700_000_000_100, 1))
)


def test_a_note_lists_the_batches_followed_last_and_one_without_them_still_decodes() -> None:
    assert WriterNote.decode(APPLIED.encode()) == APPLIED
    older = APPLIED.encode(applied=False)  # for an older reader, and as an older writer sends
    assert json.loads(older).keys() == OLDER_FIELDS
    assert WriterNote.decode(older) == NOTE  # a new reader of an older writer: no batch


def test_only_readers_that_say_they_decode_the_batches_are_sent_them(tmp_path: Path) -> None:
    new, old = WakeSocket(tmp_path, "new"), WakeSocket(tmp_path, "old")
    (old.directory / ACCEPTS_APPLIED).unlink()  # a reader of a version before it
    announcer = Announcer(tmp_path, lambda: APPLIED)
    try:
        announcer.wake()
        assert new.receive(1.0) == APPLIED
        assert old.receive(1.0) == NOTE and old.refused == 0  # without it: see above
        # A reader whose marker comes after the writer listed it gets the batch from the
        # next listing on, though the readers' directory did not change.
        (old.directory / ACCEPTS_APPLIED).touch()
        announcer.relist()
        announcer.wake()
        assert old.receive(1.0) == APPLIED
    finally:
        announcer.close()
        new.close()
        old.close()


def test_forged_or_malformed_notes_are_refused_and_counted(tmp_path: Path) -> None:
    reader = WakeSocket(tmp_path, "r")
    try:
        for count, (label, data) in enumerate(FORGED.items(), start=1):
            assert _sent(reader, data) is None, label
            assert reader.refused == count, label
        assert _sent(reader, NOTE.encode()) == NOTE  # and the writer's next note is believed
    finally:
        reader.close()


def test_the_newest_believable_note_wins_over_forged_ones_queued_after_it(tmp_path: Path) -> None:
    reader = WakeSocket(tmp_path, "r")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            for data in (NOTE.encode(), FORGED["absolute live copy"], b"junk"):
                sender.sendto(data, str(reader.directory / WAKE_SOCKET))
        assert reader.receive(1.0) == NOTE and reader.refused == 2
    finally:
        reader.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a process of another user takes root")
def test_a_note_from_another_user_is_refused(tmp_path: Path) -> None:
    """The sender connects while it may (as root), then becomes another user and sends: the
    file modes let it in, and only the credentials the kernel attaches can tell."""
    reader = WakeSocket(tmp_path, "r")
    script = (
        "import os, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
        "s.connect(sys.argv[1])\n"
        "os.setuid(65534)\n"
        "s.send(sys.argv[2].encode())\n"
    )
    try:
        address = str(reader.directory / WAKE_SOCKET)
        subprocess.run([sys.executable, "-c", script, address, NOTE.encode().decode()],
                       check=True)  # fmt: skip
        assert reader.receive(1.0) is None and reader.refused == 1
        assert _sent(reader, NOTE.encode()) == NOTE  # the same note from this user is believed
    finally:
        reader.close()


def test_readers_files_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    (tmp_path / READERS).mkdir(0o777)  # as an older version left it under umask 000
    os.chmod(tmp_path / READERS, 0o777)
    before = os.umask(0)
    try:
        announcer = Announcer(tmp_path, Notes())
        reader = WakeSocket(tmp_path, "r")
    finally:
        os.umask(before)
    try:
        modes = {
            path.name: stat.S_IMODE(path.lstat().st_mode)
            for path in (tmp_path / READERS, reader.directory, reader.directory / WAKE_SOCKET,
                         tmp_path / READERS / BATCHES)
        }  # fmt: skip
        assert modes == {READERS: 0o700, "r": 0o700, WAKE_SOCKET: 0o600, BATCHES: 0o600}
    finally:
        reader.close()
        announcer.close()


def test_the_batch_counter_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"hello world")
    (tmp_path / READERS).mkdir()
    (tmp_path / READERS / BATCHES).symlink_to(victim)
    with pytest.raises(OSError) as raised:
        Announcer(tmp_path, Notes())
    assert raised.value.errno == errno.ELOOP
    assert victim.read_bytes() == b"hello world"


def test_a_symlinked_readers_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(0o755)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / READERS).symlink_to(elsewhere)
    with pytest.raises(OSError):
        WakeSocket(tmp_path / "store", "r")
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755 and not any(elsewhere.iterdir())


def test_notes_never_go_through_a_symlinked_reader_directory(tmp_path: Path) -> None:
    """A link in readers/ would aim the writer's notes at a socket elsewhere."""
    other = WakeSocket(tmp_path / "other", "r")
    announcer = Announcer(tmp_path / "store", Notes())
    (tmp_path / "store" / READERS / "planted").symlink_to(other.directory)
    reader = WakeSocket(tmp_path / "store", "real")
    try:
        # The announcer lists readers/ once a second: wake until the real reader is known.
        deadline, heard = time.monotonic() + 10, None
        while heard is None and time.monotonic() < deadline:
            announcer.wake()
            heard = reader.receive(0.2)
        assert heard is not None and other.receive(0.5) is None
    finally:
        reader.close()
        other.close()
        announcer.close()
