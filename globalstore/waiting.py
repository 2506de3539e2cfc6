"""Waiting for a store to reach something: a condition the store's thread notifies when it
publishes a change, a predicate and a deadline; threads block on it, coroutines await it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import NamedTuple

__all__ = ["Published", "Wait", "wait_until", "wait_until_async"]


def _nothing() -> None:
    pass


class Wait(NamedTuple):
    """What a caller waits for: `reached()`, looked at each time `published` is notified;
    `check()` runs before each wait and may raise (the store stopped). Whatever the two
    look at must be published before a notify_waiters() of `published`: a waiter looks only
    when woken."""

    published: Published
    reached: Callable[[], bool]
    check: Callable[[], None] = _nothing


def wait_until(wait: Wait, timeout: float | None) -> bool:
    """Block until `wait` is reached: True; False once `timeout` seconds (None: no limit)
    have passed."""
    published, reached, check = wait
    deadline = None if timeout is None else time.monotonic() + timeout
    with published:
        while not reached():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            check()
            published.wait(remaining)
    return True


async def wait_until_async(wait: Wait, timeout: float | None) -> bool:
    """wait_until() for a coroutine: the event loop runs other tasks meanwhile, and the
    thread that notifies `published` wakes this one through the loop (never a poll)."""
    published, reached, check = wait
    bell = _Bell(asyncio.get_running_loop())
    deadline = None if timeout is None else time.monotonic() + timeout
    published.watch(bell.ring)
    try:
        while True:
            bell.arm()  # before looking: a change published from here on rings
            if reached():
                return True
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            check()
            with contextlib.suppress(TimeoutError):  # one more look, then False
                await asyncio.wait_for(bell.rung.wait(), remaining)
    finally:
        published.unwatch(bell.ring)


class _Bell:
    """One coroutine's wake-up: rung from any thread, at most one call into the loop per
    look (a follower applying thousands of batches a second schedules one wake, not one
    per batch)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.rung = asyncio.Event()
        self._armed = False

    def arm(self) -> None:
        self.rung.clear()
        self._armed = True

    def ring(self) -> None:
        if not self._armed:
            return
        self._armed = False
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to wake
            self.loop.call_soon_threadsafe(self.rung.set)


class Published(threading.Condition):
    """A condition that counts the threads inside it (waiting, or about to), and keeps the
    bells of the coroutines waiting on it, so that a writer which announces every batch
    takes no lock and wakes nobody while no one waits. A thread is counted from the moment
    it holds the lock, before it looks at what it waits for, and a bell is hung before its
    coroutine looks: a change made before notify_waiters() looks at them is seen either by
    that look or by the waiter's."""

    def __init__(self) -> None:
        super().__init__()
        self._inside = 0
        self._bells: dict[Callable[[], None], None] = {}  # ordered set; read without a lock

    def __enter__(self) -> bool:
        entered = super().__enter__()
        self._inside += 1  # under the lock
        return entered

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._inside -= 1
        super().__exit__(kind, exc, tb)

    def watch(self, ring: Callable[[], None]) -> None:
        """Call `ring()` (from the notifying thread; it must not block) on every notify."""
        self._bells[ring] = None

    def unwatch(self, ring: Callable[[], None]) -> None:
        """Stop calling `ring` on notify; nothing if it was not watched."""
        self._bells.pop(ring, None)

    def notify_waiters(self) -> None:
        """notify_all(), if a thread is inside; ring every bell."""
        if self._inside:
            with self:
                self.notify_all()
        if self._bells:
            for ring in tuple(self._bells):  # a copy: a coroutine may stop watching meanwhile
                ring()
