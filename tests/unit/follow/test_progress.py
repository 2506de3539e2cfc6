"""A long job's progress: the rate over the last few seconds, not since the start, and the
ETA at that rate; a restore's progress in offsets, from its plan."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from globalstore.follow.plan import Plan
from globalstore.follow.progress import Estimate, RestoreLog


def test_the_rate_is_of_the_last_seconds_and_the_eta_follows_it() -> None:
    estimate = Estimate("restore", 10_000, began=0.0)
    for second in range(1, 31):  # 100 a second for 30 s...
        estimate.note(100 * second, float(second))
    for second in range(31, 61):  # ...then 10 a second for 30 s
        estimate.note(3_000 + 10 * (second - 30), float(second))
    p = estimate.progress(3_300, 60.0)
    assert p.rate == pytest.approx(10.0)  # the whole job's average would say 55
    assert p.left == 6_700 and p.eta_seconds == pytest.approx(670.0)
    assert (p.phase, p.done, p.total, p.elapsed_seconds) == ("restore", 3_300, 10_000, 60.0)


def test_no_eta_before_a_rate_and_none_needed_once_done() -> None:
    estimate = Estimate("migration", 5, began=0.0)
    assert estimate.progress(0, 0.0).eta_seconds is None
    done = estimate.progress(5, 1.0)
    assert done.left == 0 and done.eta_seconds == 0.0


def test_a_restore_counts_offsets_from_its_start_to_its_end(tmp_path: Path) -> None:
    restore = RestoreLog("t", tmp_path, Plan({0: 100, 1: 0}, {0: 150, 1: 50}, True), "rebuild")
    p = restore.progress({0: 120, 1: 60})  # partition 1 past its end counts to its end
    assert (p.phase, p.done, p.total, p.left) == ("rebuild", 70, 100, 30)


def test_the_log_says_rate_left_and_eta(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="globalstore.follow.progress"):
        restore = RestoreLog("t", tmp_path, Plan({0: 0}, {0: 1_000}, True))
        restore._next = 0.0  # the next batch logs at once
        restore.add(400, {0: 400})
    line = caplog.records[-1].getMessage()
    assert "400/1000 offsets (40%)" in line and "600 left, ETA" in line
