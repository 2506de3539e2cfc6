"""A long job's progress on a terminal: a redrawn bar with its rate and ETA on a terminal, a
line every few seconds otherwise (`restore`, `follow`, `migrate`)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from typing import TextIO

from globalstore.follow.progress import Estimate
from globalstore.follow.topic import records_between
from globalstore.listeners import StoreListener

__all__ = ["ProgressBar"]

_LOG_INTERVAL = 5.0  # seconds between progress lines when stderr is not a terminal
_BAR_INTERVAL = 0.1  # seconds between redraws of the terminal progress bar
_BAR_WIDTH = 30


class ProgressBar(StoreListener):
    """Restore progress on stderr: a redrawn bar on a terminal, a line every few seconds
    otherwise. Called from the store's thread, which is the only one writing meanwhile."""

    def __init__(
        self, out: TextIO, tty: bool, doing: str = "restoring", unit: str = "records"
    ) -> None:
        self.out = out
        self.tty = tty
        self.doing, self.unit = doing, unit
        self.start: dict[int, int] = {}
        self.end: dict[int, int] = {}
        self.total = 0
        self.estimate = Estimate(doing, 0)
        self.last_shown = 0.0

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        """Note the offsets to restore and print how many records that is."""
        self.start, self.end = dict(start_offsets), dict(end_offsets)
        self.begin(records_between(self.start, self.end))
        self.write(f"restoring {topic}: {self.total:,} records to read")

    def begin(self, total: int) -> None:
        """A job of `total` units starts now."""
        self.total = total
        self.estimate = Estimate(self.doing, total)
        self.last_shown = self.estimate.began

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        """Redraw the bar, or print a line, when the last one is old enough."""
        now = time.monotonic()
        reached = {p: min(positions.get(p, s), self.end[p]) for p, s in self.start.items()}
        done = records_between(self.start, reached)
        self.estimate.note(done, now)
        if now - self.last_shown < (_BAR_INTERVAL if self.tty else _LOG_INTERVAL):
            return
        self.last_shown = now
        self.show(done, now)

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        """Finish the bar and print the records restored, the time taken and the rate."""
        if self.tty and self.total:
            self.show(self.total, time.monotonic())
            self.out.write("\n")
        rate = total_records / seconds if seconds > 0 else 0.0
        self.write(f"restored {total_records:,} records in {seconds:.1f}s ({rate:,.0f} records/s)")

    def show(self, done: int, now: float) -> None:
        """Show `done` of the total at `now` (monotonic) with the rate of the last few seconds
        and the ETA at that rate: the bar on a terminal, else a line."""
        progress = self.estimate.progress(done, now)
        rate, eta = progress.rate, progress.eta_seconds
        eta_text = "?" if eta is None else str(datetime.timedelta(seconds=round(eta)))
        pct = 100.0 * done / self.total if self.total else 100.0
        text = f"{done:,}/{self.total:,} ({pct:.0f}%) {rate:,.0f} {self.unit}/s ETA {eta_text}"
        if self.tty:
            filled = round(_BAR_WIDTH * pct / 100)
            bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
            self.out.write(f"\r[{bar}] {text}")
            self.out.flush()
        else:
            self.write(f"{self.doing}: {text}")

    def write(self, line: str) -> None:
        """Print `line`, over a half-drawn bar on a terminal."""
        if self.tty:
            self.out.write("\r\x1b[K")  # clear a half-drawn bar first
        self.out.write(line + "\n")
        self.out.flush()
