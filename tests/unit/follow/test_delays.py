"""Record delays counted by bucket, milliseconds to minutes, with their number and sum."""

from __future__ import annotations

import math

import pytest

from globalstore.follow.delays import BOUNDS, RecordDelays


def test_records_are_counted_in_the_bucket_of_their_delay() -> None:
    delays = RecordDelays()
    delays.observe(0.003, 10)  # at most 5 ms
    delays.observe(0.005, 1)  # a bound counts as within it
    delays.observe(42.0, 2)  # within a minute
    delays.observe(-1.0, 1)  # a producer clock ahead: no delay
    delays.observe(3_600.0, 1)  # beyond every finite bound
    got = delays.snapshot()
    by_bound = dict(zip(got.bounds, got.counts, strict=True))
    assert by_bound[0.005] == 12 and by_bound[60.0] == 2 and by_bound[math.inf] == 1
    assert got.total == 15 == sum(got.counts)
    assert got.sum_seconds == pytest.approx(10 * 0.003 + 0.005 + 84.0 + 3_600.0)


def test_the_bounds_run_from_milliseconds_to_minutes() -> None:
    assert BOUNDS[0] <= 0.005 and BOUNDS[-2] >= 300 and BOUNDS[-1] == math.inf
    assert list(BOUNDS) == sorted(BOUNDS)
