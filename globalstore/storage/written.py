"""WrittenKeys: the keys a bulk restore into a store that was empty when it began has
written, which a write need not look up the old state of (old index entries, or the value a
version entry keeps) unless it has written them before: a key it has not written has none.
Which keys it has written, a KeyFilter (_entries.c) keeps, never missing one; a key it took
for written by mistake (about one in a hundred) costs only the lookup the others save.
"""

from __future__ import annotations

from collections.abc import Callable

try:
    from globalstore.storage import _entries
except ImportError:  # built without its C extension: every key is looked up
    _entries = None  # type: ignore[assignment]

__all__ = ["WrittenKeys"]


class WrittenKeys:
    """The keys written since the store was empty, while only bulk applies have come."""

    def __init__(self, is_empty: Callable[[], bool]) -> None:
        self._is_empty = is_empty
        self._written: _entries.KeyFilter | None = None
        self._fresh: bool | None = None  # None: no batch since the store was opened or wiped

    def forget(self) -> None:
        """The store was wiped: whether it is empty is decided again at the next batch."""
        self._written, self._fresh = None, None

    def filter(self, bulk: bool) -> _entries.KeyFilter | None:
        """The filter of the keys written before (None: any key may have old state), for a
        batch; `bulk`: of a bulk restore. Called before the batch is written."""
        if not bulk or _entries is None:
            self._written, self._fresh = None, False  # from now on every key is looked up
            return None
        if self._fresh is None:  # the first batch: before it is written
            self._fresh = self._is_empty()
            self._written = _entries.KeyFilter() if self._fresh else None
        return self._written
