"""Freshness as a distribution: how long the records a store follows took from their
timestamp (set by the producer, or the broker with LogAppendTime) to being applied.

Each batch is counted once per record at the delay of its oldest record, an upper bound for
the others: the C loop hands over one timestamp a batch, and following batches are small.
Only records applied while following are counted: a restore's records are as old as the
topic, and its progress is reported apart (progress.py).
"""

from __future__ import annotations

import bisect
import math
from typing import NamedTuple

from globalstore.status import Delays

__all__ = ["BOUNDS", "RECENT_BATCHES", "FollowedBatch", "RecordDelays"]

# From a few milliseconds (a record visible at once) to minutes (a store far behind).
BOUNDS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, math.inf,
)  # fmt: skip


class RecordDelays:
    """Counts records by their delay; read as one Delays snapshot."""

    def __init__(self) -> None:
        self._counts = [0] * len(BOUNDS)
        self._total = 0
        self._sum = 0.0

    def observe(self, seconds: float, records: int) -> None:
        """`records` were applied `seconds` after their timestamp (a clock set apart from
        the producer's can make it negative: counted as no delay)."""
        seconds = max(0.0, seconds)
        self._counts[bisect.bisect_left(BOUNDS, seconds)] += records
        self._total += records
        self._sum += seconds * records

    def snapshot(self) -> Delays:
        """What has been counted so far."""
        return Delays(BOUNDS, tuple(self._counts), self._total, self._sum)


# The batches followed last that a writer's note lists: a reader that reads one note for
# several batches (it takes the newest of those queued) still counts each.
RECENT_BATCHES = 16


class FollowedBatch(NamedTuple):
    """A batch a follower applied, as its writer's note tells reader processes, which count
    its records' delay once they show it (stage "visible")."""

    number: int  # 1, 2, ... per follower thread: a reader counts each number once
    oldest_ms: int  # the timestamp of its oldest record
    records: int
