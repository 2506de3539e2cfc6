"""The writer process of SharedStore.with_writer() while its store is not ready (the broker
is unreachable, as in an outage or a long restore; no broker needed): it ends with its
parent, a SIGKILL included, and close() stops it at once. Its log lines reach the parent one
record a line."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from globalstore import SharedStore
from globalstore.stores.writer_main import _LOG_FORMAT, _OneRecordALine
from tests.unit.server.test_workers import _alive, children_of
from tests.waiting import eventually

_UNREACHABLE = "127.0.0.1:9"  # nothing listens: the writer retries for ever, never ready

# The parent starts a store with a writer of its own, prints the writer's pid, and waits.
_PARENT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from globalstore import SharedStore
    store = SharedStore.with_writer("t", sys.argv[1], sys.argv[2]).start(wait=False)
    me = os.getpid()
    tasks = Path(f"/proc/{me}/task").iterdir()
    print(*[c for t in tasks for c in (t / "children").read_text().split()], flush=True)
    time.sleep(600)
    """
)


def test_a_writer_that_is_not_ready_ends_with_its_killed_parent(tmp_path: Path) -> None:
    command = [sys.executable, "-c", _PARENT, _UNREACHABLE, str(tmp_path / "s")]
    parent = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        (writer,) = (int(pid) for pid in parent.stdout.readline().split())
        time.sleep(2.0)  # it is trying to reach the broker by now
        assert _alive(writer)
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        eventually(lambda: not _alive(writer), 15, lambda: f"writer {writer} outlived its parent")
    finally:
        parent.kill()


def test_close_stops_a_writer_that_is_not_ready_at_once(tmp_path: Path) -> None:
    store = SharedStore.with_writer("t", _UNREACHABLE, tmp_path / "s").start(wait=False)
    time.sleep(2.0)  # it has run its program, and is trying to reach the broker
    (writer,) = children_of(os.getpid(), b"writer_main")
    began = time.monotonic()
    store.close()
    assert time.monotonic() - began < 10  # not the 30 s after which a writer is killed
    assert not _alive(writer)


def test_a_message_cannot_pass_for_a_record_in_the_parents_log() -> None:
    formatter = _OneRecordALine(_LOG_FORMAT)
    forged = logging.LogRecord("x", logging.INFO, "f", 1, "hello\nCRITICAL x: forged", (), None)
    first, *rest = formatter.format(forged).split("\n")
    assert first == "INFO x: hello" and rest == ["  CRITICAL x: forged"]
