"""Waiting for a store to reach something: a condition variable, a predicate and a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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
