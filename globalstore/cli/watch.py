"""`globalstore status --watch`: one store's state, rate, lag, keys and staleness, refreshed.

On a terminal the picture is redrawn in place; otherwise (a pipe, a log file) each refresh is
one plain line, so the output stays readable where it ends up.
"""

from __future__ import annotations

import datetime
import itertools
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from globalstore.read.protocols import StoreStatus

__all__ = ["Watcher", "watch"]


class Watcher:
    """Turns successive status reports into frames: the rate comes from their positions."""

    def __init__(self, out: TextIO, tty: bool) -> None:
        self.out = out
        self.tty = tty
        self._last: tuple[float, int] | None = None  # (monotonic time, sum of positions)
        self._drawn = 0  # lines of the frame on screen

    def show(self, report: StoreStatus) -> None:
        """Print `report`: a redrawn frame on a terminal, else one line; the rate comes from the
        report before."""
        now, applied = time.monotonic(), sum(report.position.values())
        rate = None
        if self._last is not None and now > self._last[0]:
            rate = (applied - self._last[1]) / (now - self._last[0])
        self._last = (now, applied)
        if self.tty:
            self._redraw(_frame(report, rate))
        else:
            self.out.write(_line(report, rate) + "\n")
        self.out.flush()

    def _redraw(self, lines: list[str]) -> None:
        if self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")  # back to the frame's top, clear
        self.out.write("\n".join(lines) + "\n")
        self._drawn = len(lines)


def watch(
    report: Callable[[], StoreStatus],
    watcher: Watcher,
    interval: float,
    count: int | None,
) -> None:
    """Show `report()` every `interval` seconds, `count` times (None: until Ctrl-C)."""
    for shown in itertools.count(1):
        watcher.show(report())
        if count is not None and shown >= count:
            return
        time.sleep(interval)


def _frame(s: StoreStatus, rate: float | None) -> list[str]:
    return [
        f"{s.topic}  {s.state}{'' if s.connected else ' (broker not connected)'}",
        f"  applying   {_rate(rate)}",
        f"  lag        {sum(s.lag.values()):,} records",
        *(f"    p{p:<6} {lag:,}" for p, lag in sorted(s.lag.items())),
        f"  keys       {'unknown' if s.key_count is None else f'{s.key_count:,}'}",
        f"  staleness  {_staleness(s.staleness_seconds)}",
    ]


def _line(s: StoreStatus, rate: float | None) -> str:
    clock = datetime.datetime.now().strftime("%H:%M:%S")
    keys = "?" if s.key_count is None else s.key_count
    return (
        f"{clock} {s.state} keys={keys} rate={_rate(rate)} lag={sum(s.lag.values())} "
        f"{_per_partition(s.lag)} staleness={_staleness(s.staleness_seconds)}"
    )


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f} records/s"


def _staleness(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds:.1f}s"


def _per_partition(values: Mapping[int, int]) -> str:
    return "{" + " ".join(f"{p}:{v}" for p, v in sorted(values.items())) + "}"
