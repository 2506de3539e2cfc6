"""How a writer wakes its reader processes (announce.py), with real Unix sockets."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from globalstore.replicas.announce import (
    HEARTBEAT_S,
    READERS,
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
