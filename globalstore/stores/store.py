"""Store: the queries, start, waits and close of every store, written once over its source
(read/source.py). GlobalStore, SharedStore, ReadOnlyStore and SwitchingStore are Stores over
the source their arguments describe; aio.AsyncStore is the same over the same sources, with
what blocks awaited."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from globalstore.errors import StoreClosed
from globalstore.read.changes import DEFAULT_BUFFER, ChangeFeed
from globalstore.read.protocols import StoreStatus, partition_offsets
from globalstore.read.source import StoreSource
from globalstore.read.view import Viewable
from globalstore.waiting import wait_until

__all__ = ["Store"]

_T = TypeVar("_T")


class Store(Viewable[StoreSource]):
    """A store over a source (Store(source)): what it answers, and when, is the source's."""

    @property
    def source(self) -> StoreSource:
        """Where this store's data comes from."""
        return self._source

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> Self:
        """Make the store answer: restore up to the end offsets seen now (a follower), or open
        the copy a writer has made ready (a reader), then return.

        Raises StartTimeout (or BrokerUnavailable) after `timeout` seconds, or the error
        that stopped the start (TopicNotCompacted, ...). After a failed start, start() may
        be called again.

        wait=False returns at once: queries raise StoreNotReady until the store answers;
        wait_until_ready() or a listener's on_state_change tell when."""
        self._source.begin(timeout)
        if not wait:
            return self
        try:
            if self.wait_until_ready(timeout):
                return self
        except BaseException:  # the error that stopped it, Ctrl-C, close(): release it all
            self._source.abort()
            raise
        raise self._source.gave_up(timeout)

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """True once the store answers (also after a later failure: it keeps serving its last
        state), False on timeout. Raises the error that stopped it before it was ready, or
        StoreClosed if it was closed meanwhile."""
        return wait_until(self._source.ready_wait(), timeout)

    def close(self) -> None:
        """Stop following (if this store follows) and close every copy. Idempotent; safe
        from any thread, also while start() waits (which then raises StoreClosed)."""
        self._closed = True
        self._source.close()

    def __enter__(self) -> Self:
        # Both `with GlobalStore(...) as s:` and `with GlobalStore(...).start(t) as s:` work.
        return self if self._source.started() else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- position and freshness --------------------------------------------------------------

    def position(self) -> dict[int, int]:
        """{partition: next offset already applied}, in the copy that answers now."""
        return self._source.position()

    def lag(self) -> dict[int, int]:
        """{partition: records between what is applied and the topic's last known end}."""
        return self._source.lag()

    def wait_for(
        self, position: Mapping[int, int] | Mapping[str, int], timeout: float | None = None
    ) -> bool:
        """Block until every partition in `position` ({partition: offset}; a partition as an
        int or a string of digits, as /v1/status names it) is applied at least that far
        (also while the store is still restoring). Returns False on timeout; ValueError for a
        partition the topic does not have."""
        wanted = partition_offsets(position)
        return self._repeated(lambda: wait_until(self._source.position_wait(wanted), timeout))

    def count(self) -> int:
        """Number of live keys, kept as a counter. Right after a bulk (cold) restore the store
        is ready before its keys are counted (about a second per million keys, in the
        background): a follower in this process is waited for, others count over a scan."""
        return self._repeated(self._count)

    def _count(self) -> int:
        wait = self._source.count_wait()
        if wait is not None:
            wait_until(wait, None)
        return self._stored_count()

    def status(self) -> StoreStatus:
        """State, position, lag, key count, layout, last restore, staleness and freshness
        (against max_staleness), last error, and the error type that stopped the store."""
        return self._source.status()

    def checkpoint(self, dest: str | Path) -> None:
        """Write a consistent RocksDB checkpoint of the running store into `dest` (which must
        not exist): data and offsets of one instant, so a new instance can start from it
        (bootstrap_from). StorageError where the store cannot take one (a reader of another
        process's store: take it from the writer)."""
        self._repeated(lambda: self._source.checkpoint(Path(dest)))

    def changes(
        self, prefix: str | None = None, keys: Iterable[str] | None = None, *,
        buffer: int = DEFAULT_BUFFER,
    ) -> ChangeFeed:  # fmt: skip
        """A feed of the changes the store applies from now on to the keys under `prefix`
        and/or among `keys` (all when neither), each once it is visible to queries, in
        offset order per partition: Change(key, value or None for a delete, partition,
        offset). Past `buffer` records not taken, one Resync item replaces them: re-read
        then. Close it (or use `with`). StoreNotReady until the store is ready."""
        return self._repeated(lambda: self._source.open_feed(prefix, keys, buffer))

    def end_changes(self) -> None:
        """End every change feed of this store, and any opened from now on: each hands out
        what it holds, then stops. Queries go on. For an application's shutdown, whose
        server waits for open streams before it closes anything (a signal handler may call
        it: it takes no lock; globalstore.server.end_changes_on_exit_signals does)."""
        self._source.end_feeds()

    def _repeated(self, call: Callable[[], _T]) -> _T:
        """`call`, repeated if it met the store closed because it moved to another copy (a
        switch closes the old store at once)."""
        before = self._source.serving()
        try:
            return call()
        except StoreClosed:
            if self._closed or self._source.serving() in (before, None):
                raise
            return self._repeated(call)
