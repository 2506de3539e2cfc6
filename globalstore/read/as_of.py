"""Reads as of a time (storage/versions.py says which version answers): the time a caller
gives, the horizon it must not be older than, and the lookups and scans of the versions.

A time is epoch seconds (int or float) or an aware datetime; it is compared with record
timestamps in whole milliseconds, so as of t means "at or before t's millisecond". A key
whose version as of t is older than the ttl at t reads as absent (expired then).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterator

from globalstore.errors import HistoryUnavailable
from globalstore.read.protocols import AsOf
from globalstore.shaping import ttl
from globalstore.shaping.history import horizon_ms
from globalstore.storage.reads import Reads
from globalstore.storage.versions import LAYOUT

__all__ = ["AsOf", "lookup", "moment", "parse", "scan", "to_ms"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# The epoch seconds a datetime can name (years 1 to 9999): a time outside them is a
# mistake, and no record timestamp is there.
_FIRST_S = (dt.datetime.min.replace(tzinfo=dt.UTC) - _EPOCH).total_seconds()
_LAST_S = (dt.datetime.max.replace(tzinfo=dt.UTC) - _EPOCH).total_seconds()


def to_ms(as_of: AsOf) -> int:
    """`as_of` as epoch milliseconds; ValueError for a naive datetime or another type."""
    if isinstance(as_of, dt.datetime):
        if as_of.tzinfo is None or as_of.utcoffset() is None:
            raise ValueError(f"as_of must be an aware datetime (with a time zone), not {as_of!r}")
        return (as_of - _EPOCH) // dt.timedelta(milliseconds=1)
    if isinstance(as_of, bool) or not isinstance(as_of, int | float) or not math.isfinite(as_of):
        raise ValueError(f"as_of must be epoch seconds or an aware datetime, not {as_of!r}")
    _check_range(as_of)
    # Through the decimal the float prints as: 2.01 s is 2010 ms, where 2.01 * 1000 is not.
    return int(decimal.Decimal(repr(as_of)).scaleb(3) // 1)


def parse(text: str) -> AsOf:
    """A time as a user writes it: epoch seconds, or RFC 3339 with a time zone
    (2026-11-29T09:00:00Z); ValueError naming the two forms otherwise."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(f"a time must be a finite number of seconds, not {text[:40]!r}")
        _check_range(seconds)
        return seconds
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"a time is RFC 3339 (2026-11-29T09:00:00Z) or epoch seconds, not {text[:40]!r}"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"a time must name its time zone (Z or +hh:mm), not {text[:40]!r}")
    return when


def _check_range(seconds: float) -> None:
    """ValueError for epoch seconds outside the years 1 to 9999."""
    if not _FIRST_S <= seconds <= _LAST_S:
        raise ValueError(
            f"a time must lie between the years 1 and 9999 (epoch seconds {_FIRST_S:.0f} to "
            f"{_LAST_S:.0f}), not {seconds!r}"
        )


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def moment(storage: Reads, t: int) -> int:
    """`t` (ms), the time a read as of a time reads `storage` at; HistoryUnavailable if it
    is older than the oldest time the store can answer (at the instant `storage` sees: now,
    or when a view was taken), or the store keeps no history."""
    state = storage.state
    if state.history_ms is None:
        raise HistoryUnavailable(
            f"store {storage.path} keeps no history: a read as of a time needs history=seconds"
        )
    if (state.history_layout or 1) != LAYOUT:  # a writer of this version rebuilds them
        raise HistoryUnavailable(
            f"store {storage.path} keeps its versions in history layout "
            f"{state.history_layout or 1}, which this version does not read (it reads "
            f"layout {LAYOUT}): a store of this version rebuilds them"
        )
    oldest = horizon_ms(state.history_ms, state.history_from_ms, storage.taken_ms)
    if t < oldest:
        raise HistoryUnavailable(
            f"store {storage.path} cannot answer as of {_iso(t)}: the oldest time it can "
            f"answer is {_iso(oldest)} (epoch {oldest / 1000})",
            oldest / 1000,
        )
    return t


def lookup(storage: Reads, key: bytes, t_ms: int) -> bytes | None:
    """The stored bytes of `key` as of `t_ms`, None if absent then (or expired then)."""
    raw = storage.history.get(key, t_ms)
    ttl_ms = storage.state.ttl_ms
    if raw is not None and ttl_ms is not None and ttl.is_expired(raw, t_ms - ttl_ms):
        return None
    return raw


def scan(
    storage: Reads, lower: bytes | None, upper: bytes | None, reverse: bool, t_ms: int
) -> Iterator[tuple[bytes, bytes]]:
    """(key, stored bytes) as of `t_ms` in [lower, upper), expired ones left out. In reverse
    the answer is gathered first: versions are read in key order only."""
    rows = storage.history.scan(lower, upper, t_ms)
    ttl_ms = storage.state.ttl_ms
    if ttl_ms is not None:
        rows = ttl.unexpired(rows, t_ms - ttl_ms)
    return reversed(list(rows)) if reverse else rows
