"""The copy of a store that answers now, and the one way to replace it.

`Live` holds the copy (read/copy.py) that answers and swaps another in at one instant
(`swap`: a self-heal swaps replicas, a SharedStore the writer's copies, a SwitchingStore
whole stores). Readers take `Live.current` once per call. A scan (`scan`) holds its copy: a
swap never waits for it, and the copy stays open until its last scan ends, however many
swaps come meanwhile.

Retiring, the one policy: a point read that took the old copy just before a swap may still
be on it, and a point read is not tracked (that would cost every get a lock). So the copy a
swap replaces stays open, retired, until the next swap or close(), when nothing can still
hold it (then it closes, or once its last scan ends if one is open); `take_retired()` hands
it to a caller that reuses it (a heal rebuilds in its directory) or closes it sooner because
its reads retry elsewhere (SwitchingStore), once no scan is open on it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["Closable", "Live"]


class Closable(Protocol):
    """What a copy Live holds must do: close."""

    def close(self) -> None:
        """Release what the copy holds."""


_C = TypeVar("_C", bound=Closable)
_Item = TypeVar("_Item")


class Live(Generic[_C]):
    """The copy that answers now, replaced at one instant by swap()."""

    def __init__(self, first: _C) -> None:
        self.current = first  # read once per call: one reference, replaced whole
        self._retired: _C | None = None
        self._scans: dict[int, int] = {}  # open scans per copy (by id), while any is open
        self._draining: dict[int, _C] = {}  # copies past retiring, closed at their last scan
        self._changed = threading.Condition()

    def swap(self, new: _C) -> None:
        """Answer from `new` from now on; the old copy retires, and the copy retired before
        it closes (once its last scan ends, if one is open)."""
        with self._changed:
            before, self._retired, self.current = self._retired, self.current, new
            if before is not None and self._scans.get(id(before)):
                self._draining[id(before)], before = before, None
        if before is not None:
            before.close()

    def take_retired(self) -> _C | None:
        """The retired copy, once no scan is open on it, now the caller's to reuse or close;
        None if there is none."""
        with self._changed:
            while self._retired is not None and self._scans.get(id(self._retired)):
                self._changed.wait()
            retired, self._retired = self._retired, None
        return retired

    def close(self) -> None:
        """Close every copy: the current one, the retired one and those scans still hold."""
        with self._changed:
            others = [self._retired, *self._draining.values()]
            self._retired, self._draining = None, {}
        try:
            self.current.close()
        finally:
            for copy in others:
                if copy is not None:
                    copy.close()

    def scan(self, open_scan: Callable[[_C], Iterator[_Item]]) -> Iterator[_Item]:
        """A scan of the current copy, which stays open until the scan ends."""
        with self._changed:
            copy = self.current
            self._scans[id(copy)] = self._scans.get(id(copy), 0) + 1
        try:
            scan = open_scan(copy)  # the point-in-time view is taken here
        except BaseException:
            self._scan_ended(copy)
            raise
        return _HeldScan(scan, functools.partial(self._scan_ended, copy))

    def _scan_ended(self, copy: _C) -> None:
        with self._changed:
            left = self._scans[id(copy)] - 1
            if left:
                self._scans[id(copy)] = left
                return
            del self._scans[id(copy)]
            drained = self._draining.pop(id(copy), None)
            self._changed.notify_all()
        if drained is not None:
            drained.close()


class _HeldScan(Iterator[_Item]):
    """A scan that holds its copy until it is exhausted, closed or collected."""

    def __init__(self, scan: Iterator[_Item], release: Callable[[], None]) -> None:
        self._scan: Iterator[_Item] | None = scan
        self._release = release

    def __next__(self) -> _Item:
        if self._scan is None:
            raise StopIteration
        try:
            return next(self._scan)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        scan, self._scan = self._scan, None
        if scan is not None:
            getattr(scan, "close", lambda: None)()
            self._release()

    def __del__(self) -> None:
        self.close()
