"""What a restore says in the log: what it must read, how far it got every few seconds, and
how long it took."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from globalstore.follow.plan import Plan
from globalstore.follow.topic import records_between

__all__ = ["RestoreLog"]

log = logging.getLogger(__name__)

_INTERVAL = 5.0  # seconds between progress lines


class RestoreLog:
    """Counts the records a restore applies and logs its start, progress and end."""

    def __init__(self, topic: str, path: Path, plan: Plan) -> None:
        self.topic, self.plan = topic, plan
        self.records = 0
        self.began = time.monotonic()
        self._next = self.began + _INTERVAL
        log.info(
            "restoring %s into %s: %d records to reach end offsets %s%s",
            topic,
            path,
            plan.records_to_restore,
            plan.end_offsets,
            "" if plan.exact_count else " (bulk: keys recounted once ready)",
        )

    def add(self, records: int, positions: Mapping[int, int]) -> None:
        """Count `records` more applied, up to `positions`; logs progress every 5 seconds at
        most."""
        self.records += records
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + _INTERVAL
        start, end = self.plan.start_offsets, self.plan.end_offsets
        reached = {p: min(positions.get(p, 0), e) for p, e in end.items()}
        log.info(
            "restoring %s: %d records so far, %d/%d offsets",
            self.topic,
            self.records,
            records_between(start, reached),
            records_between(start, end),
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
