"""The watch view's frames, from status reports (no store needed)."""

from __future__ import annotations

import io
import time

from globalstore.cli.watch import Watcher
from globalstore.read.protocols import StoreStatus


def _status(applied: int, lag: int) -> StoreStatus:
    return StoreStatus(
        topic="orders",
        path="s",
        state="running",
        ready=True,
        position={0: applied},
        lag={0: lag},
        key_count=applied,
        layout_version=1,
        last_restore_at=None,
        connected=True,
        staleness_seconds=0.0,
        last_error=None,
    )


def test_a_terminal_gets_one_frame_redrawn_in_place() -> None:
    out = io.StringIO()
    watcher = Watcher(out, tty=True)
    watcher.show(_status(100, 50))
    first = out.getvalue()
    assert "orders  running" in first and "-" in first and "\x1b[" not in first
    time.sleep(0.05)
    watcher.show(_status(150, 0))
    second = out.getvalue()[len(first) :]
    lines = first.count("\n")
    assert second.startswith(f"\x1b[{lines}F\x1b[J")  # back over the first frame, cleared
    assert "records/s" in second and "lag        0 records" in second


def test_a_pipe_gets_one_plain_line_per_refresh() -> None:
    out = io.StringIO()
    watcher = Watcher(out, tty=False)
    for applied in (10, 20, 30):
        watcher.show(_status(applied, 30 - applied))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "\x1b" not in out.getvalue()
    assert "running keys=30" in lines[2] and "lag=0 {0:0}" in lines[2]
    assert "rate=-" in lines[0] and "records/s" in lines[1]
