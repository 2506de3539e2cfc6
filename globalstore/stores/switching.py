"""The source of a store that answers from one store, then another: a topic-to-topic migration
(X.v1 -> X.v2, rewritten by the pipeline in a new format) switches queries from the v1 store
to the v2 store at one instant, once v2 holds everything up to the end offsets it saw when it
started (contract 4). Each read takes the active store once, so an answer is never a mix of
the two; a point read that meets the old store closing is repeated on the new one (Store),
and a scan holds its store open until it ends (replicas/live.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from globalstore.errors import GlobalStoreError
from globalstore.read.changes import ChangeFeed
from globalstore.read.copy import Copy
from globalstore.read.protocols import StoreStatus
from globalstore.replicas.live import Live
from globalstore.stores.store import Store
from globalstore.waiting import Wait

__all__ = ["SwitchingSource"]

_T = TypeVar("_T")


class SwitchingSource:
    """The active store's source, until a switch makes another store the active one."""

    def __init__(self, active: Store) -> None:
        self.stores = Live(active)  # the swap a self-heal uses too

    @property
    def active(self) -> Store:
        """The store that answers now."""
        return self.stores.current

    @property
    def topic(self) -> str:
        """The active store's topic (a switch changes it)."""
        return self.active.topic

    @property
    def path(self) -> Path:
        """The active store's directory."""
        return self.active.path

    def copy(self) -> Copy:
        """The active store's copy."""
        return self.active.source.copy()

    def serving(self) -> object | None:
        """The active store's copy: a switch moves it."""
        return self.active.source.serving()

    def scan(self, open_scan: Callable[[Copy], Iterator[_T]]) -> Iterator[_T]:
        """A scan of the active store, which stays open until the scan ends."""
        return self.stores.scan(lambda store: store.source.scan(open_scan))

    def begin(self, timeout: float) -> None:
        """Start the active store, for a server that starts what it serves."""
        self.active.source.begin(timeout)

    def ready_wait(self) -> Wait:
        """The active store's."""
        return self.active.source.ready_wait()

    def abort(self) -> None:
        """The active store's."""
        self.active.source.abort()

    def gave_up(self, timeout: float) -> GlobalStoreError:
        """The active store's."""
        return self.active.source.gave_up(timeout)

    def started(self) -> bool:
        """Whether the active store was started."""
        return self.active.source.started()

    def close(self) -> None:
        """Close the active store and the one a switch retired, if still open."""
        self.stores.close()

    def position(self) -> dict[int, int]:
        """The active store's position: offsets of ITS topic, which a switch changes."""
        return self.active.position()

    def lag(self) -> dict[int, int]:
        """The active store's lag."""
        return self.active.lag()

    def position_wait(self, wanted: Mapping[int, int]) -> Wait:
        """On the active store: offsets of ITS topic."""
        return self.active.source.position_wait(wanted)

    def count_wait(self) -> Wait | None:
        """The active store's."""
        return self.active.source.count_wait()

    def status(self) -> StoreStatus:
        """The active store's status."""
        return self.active.status()

    def checkpoint(self, dest: Path) -> None:
        """A checkpoint of the active store."""
        self.active.source.checkpoint(dest)

    def open_feed(self, prefix: str | None, keys: Iterable[str] | None, buffer: int) -> ChangeFeed:
        """The active store's feed. A switch closes that store, which ends the feed: open one
        again, on the store switched to, and re-read."""
        return self.active.source.open_feed(prefix, keys, buffer)

    def end_feeds(self) -> None:
        """End every feed, and any opened from now on (no lock taken)."""
        self.active.source.end_feeds()
