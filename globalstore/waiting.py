"""Waiting for a store to reach something: a condition variable, a predicate and a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["Changes", "wait_until"]

_RECHECK_S = 0.1  # the longest a waiter sleeps between two looks


def wait_until(
    changed: threading.Condition,
    reached: Callable[[], bool],
    timeout: float | None,
    check: Callable[[], None] = lambda: None,
) -> bool:
    """Block until `reached()`, looking again each time `changed` is notified; False once
    `timeout` seconds (None: no limit) have passed. `check()` runs before each wait and may
    raise (the store stopped). A waiter looks again at least every 0.1 s, so a state
    replaced without a notify is still seen."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with changed:
        while not reached():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            check()
            changed.wait(_RECHECK_S if remaining is None else min(remaining, _RECHECK_S))
    return True


class Changes(threading.Condition):
    """A condition that counts the threads inside it (waiting, or about to), so that a writer
    which announces every batch takes no lock and wakes nobody while no one waits. A thread
    is counted from the moment it holds the lock, before it looks at what it waits for: a
    change made before notify_waiters() looks at the count is seen either by that look or by
    the waiter's."""

    def __init__(self) -> None:
        super().__init__()
        self._inside = 0

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

    def notify_waiters(self) -> None:
        """notify_all(), if anyone is inside."""
        if self._inside:
            with self:
                self.notify_all()
