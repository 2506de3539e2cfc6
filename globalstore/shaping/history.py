"""History: GlobalStore(..., history=seconds) keeps every version of every key written within
the window, for reads as of a time (read/queries.py); storage/history.py holds the versions
and says what "as of t" means.

What this module decides: a store written without history is rebuilt to get one (the
versions of keys not written since could not be found otherwise), and so is one whose
versions are in another layout than this code's (never misread); one with history keeps
it across another window length; and the background purge of the versions that no read
inside the window can answer with, run by the store thread between follow batches.
"""

from __future__ import annotations

import time

from globalstore.config import StoreConfig
from globalstore.storage.history import History
from globalstore.storage.meta import Meta
from globalstore.storage.versions import LAYOUT

__all__ = ["Prune", "horizon_ms", "rebuild_reason", "to_ms"]


def to_ms(seconds: float | None) -> int | None:
    """A window in seconds as whole milliseconds (at least 1); None stays None."""
    return None if seconds is None else max(1, round(seconds * 1000))


def rebuild_reason(meta: Meta, config: StoreConfig) -> str | None:
    """Why a store must be rebuilt for the history the config asks: it has none yet."""
    if config.history is None:
        return None
    if meta.history_ms is None:
        return "history was turned on: versions are kept from a restore on"
    if (meta.history_layout or 1) != LAYOUT:
        return (
            f"its versions are in history layout {meta.history_layout or 1}, "
            f"this version keeps layout {LAYOUT}"
        )
    return None


def horizon_ms(history_ms: int, from_ms: int | None, now_ms: int | None = None) -> int:
    """The oldest time (ms) a read as of a time can ask for: the window's start, and never
    before the versions are complete (the store's restore or resume)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return max(now - history_ms, from_ms or 0)


class Prune:
    """Deletes the versions older than the window, a chunk per step(), between follow
    batches. A sweep that reached the end waits `idle` seconds before the next one."""

    def __init__(self, history: History, history_ms: int, chunk: int = 2_000, idle: float = 1.0):
        self.history, self.history_ms = history, history_ms
        self.chunk, self.idle = max(1, chunk), idle
        self.pruned = 0  # versions deleted since this start
        self._due = 0.0  # monotonic time of the next step that does work

    def step(self) -> int:
        """Sweep a chunk further; returns the versions deleted."""
        now = time.monotonic()
        if now < self._due:
            return 0
        done = self.history.purge(int(time.time() * 1000) - self.history_ms, self.chunk)
        self.pruned += done.removed
        if not done.more:
            self._due = now + self.idle
        return done.removed

    @property
    def busy(self) -> bool:
        """More to do right away."""
        return time.monotonic() >= self._due
