"""Waiting in tests: poll a condition until it holds, and say what was seen if it never does."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(
    condition: Callable[[], bool],
    timeout_s: float,
    seen: Callable[[], object],
    interval_s: float = 0.1,
) -> None:
    """Poll `condition` every `interval_s` until it holds; past `timeout_s`, fail the test
    with `seen()` (what the condition was waiting on, as it stood then)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {seen()}")
        time.sleep(interval_s)
