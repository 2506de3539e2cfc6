"""Values a scan leaves out because they do not decode: one bad record never ends a scan of
the others. Each is reported to the caller's on_invalid, or else logged once per process."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from globalstore.codec import OnInvalid
from globalstore.errors import InvalidValue

__all__ = ["skipping", "warn_once"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_Row = TypeVar("_Row")


def skipping(rows: Iterator[_Row], read: Callable[[_Row], _T], report: OnInvalid) -> Iterator[_T]:
    """read(row) of each row; a row whose value does not decode is left out and reported."""
    for row in rows:
        try:
            out = read(row)
        except InvalidValue as exc:
            report(exc)
            continue
        yield out


# The records the default report has warned of, so that a scan run every second does not
# repeat a WARNING per bad record each time; when full it starts over (and warns again).
_WARNED_MAX = 10_000
_warned: set[tuple[str, str, str, int, int]] = set()


def warn_once(path: Path, exc: InvalidValue) -> None:
    """Log a value a scan left out: WARNING the first time this process leaves that record
    out, DEBUG after that."""
    record = (str(path), exc.topic, exc.key, exc.partition, exc.offset)
    first = record not in _warned
    if first:
        if len(_warned) >= _WARNED_MAX:
            _warned.clear()
        _warned.add(record)
    level = logging.WARNING if first else logging.DEBUG
    log.log(level, "a scan of the store in %s left out a value: %s", path, exc)
