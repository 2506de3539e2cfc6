"""How far a long job is (a restore, a rebuild, a migration): its rate over the last few
seconds and the time left at that rate; and what a restore says in the log: what it must
read, how far it got every few seconds (with rate and ETA), and how long it took."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Mapping
from pathlib import Path

from globalstore.follow.plan import Plan
from globalstore.follow.topic import records_between
from globalstore.status import Progress

__all__ = ["Estimate", "RestoreLog"]

log = logging.getLogger(__name__)

_INTERVAL = 5.0  # seconds between progress lines
# The rate is taken over this many seconds: long enough to smooth the batches' ups and
# downs, short enough that a rate that changes (the broker's cache, a busy disk) shows soon.
_WINDOW = 20.0
_SAMPLE = 0.5  # seconds between two samples kept for the rate


class Estimate:
    """The rate and ETA of a job of `total` units, from how many were done when."""

    def __init__(self, phase: str, total: int, began: float | None = None) -> None:
        self.phase, self.total = phase, total
        self.began = time.monotonic() if began is None else began
        self._samples: collections.deque[tuple[float, int]] = collections.deque([(self.began, 0)])

    def note(self, done: int, now: float) -> None:
        """`done` units were done at `now` (monotonic seconds)."""
        if now - self._samples[-1][0] < _SAMPLE:
            return
        self._samples.append((now, done))
        # Keep one sample at or before the window's start, so the rate spans the window.
        while len(self._samples) > 2 and self._samples[1][0] <= now - _WINDOW:
            self._samples.popleft()

    def progress(self, done: int, now: float | None = None) -> Progress:
        """The job's Progress once `done` units are done, at `now` (default: now)."""
        now = time.monotonic() if now is None else now
        self.note(done, now)
        since, then = self._samples[0]
        rate = (done - then) / (now - since) if now > since else 0.0
        left = max(0, self.total - done)
        eta = left / rate if rate > 0 else (0.0 if left == 0 else None)
        return Progress(self.phase, done, self.total, left, rate, eta, now - self.began)


class RestoreLog:
    """Follows the offsets a restore reaches; logs its start, progress and end."""

    def __init__(self, topic: str, path: Path, plan: Plan, phase: str = "restore") -> None:
        self.topic, self.plan = topic, plan
        self.records = 0
        self.estimate = Estimate(phase, plan.records_to_restore)
        self.began = self.estimate.began
        self._next = self.began + _INTERVAL
        log.info(
            "restoring %s into %s: %d records to reach end offsets %s%s",
            topic,
            path,
            plan.records_to_restore,
            plan.end_offsets,
            "" if plan.exact_count else " (bulk: keys recounted once ready)",
        )

    def progress(self, positions: Mapping[int, int]) -> Progress:
        """How far the restore is at `positions`: offsets read, left, rate and ETA."""
        start, end = self.plan.start_offsets, self.plan.end_offsets
        reached = {p: min(max(positions.get(p, 0), start.get(p, 0)), e) for p, e in end.items()}
        return self.estimate.progress(records_between(start, reached))

    def add(self, records: int, positions: Mapping[int, int]) -> None:
        """Count `records` more applied, up to `positions`; logs progress every 5 seconds at
        most."""
        self.records += records
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + _INTERVAL
        p = self.progress(positions)
        eta = "?" if p.eta_seconds is None else f"{p.eta_seconds:.0f}s"
        log.info(
            "restoring %s: %d records so far, %d/%d offsets (%.0f%%), %.0f offsets/s, "
            "%d left, ETA %s",
            self.topic,
            self.records,
            p.done,
            p.total,
            100.0 * p.done / p.total if p.total else 100.0,
            p.rate,
            p.left,
            eta,
        )

    def done(self) -> float:
        """Log the end; the restore's seconds."""
        seconds = time.monotonic() - self.began
        rate = self.records / seconds if seconds > 0 else 0.0
        log.info(
            "restored %s: %d records in %.2fs (%.0f records/s); following",
            self.topic,
            self.records,
            seconds,
            rate,
        )
        return seconds
