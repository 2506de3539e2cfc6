"""Freshness as a distribution on a real broker: records followed are counted by their delay
from their timestamp to being applied, by the C loop and by the Python loop alike, and to
being visible in a reader (SharedStore); records restored are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from globalstore import GlobalStore, SharedStore
from globalstore.follow.topic import end_offsets
from globalstore.status import Delays
from tests.integration.store_support import produce
from tests.waiting import eventually

NONE = Delays((), (), 0, 0.0)


@pytest.mark.parametrize("native", [True, False], ids=["c-loop", "python-loop"])
def test_records_followed_are_counted_by_delay(
    kafka_bootstrap: str, make_topic, tmp_path: Path, native: bool
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"old-{i}", {"i": i}) for i in range(50)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", native_restore=native) as store:
        assert (store.status().record_delays or NONE).total == 0  # restored: not counted
        produce(kafka_bootstrap, topic, [(f"new-{i}", {"i": i}) for i in range(20)])
        assert store.wait_for(end_offsets(kafka_bootstrap, topic, 30), 30)
        delays = store.status().record_delays
        assert delays is not None and delays.total == 20
        assert delays.sum_seconds / delays.total < 5.0  # applied within seconds of produce
        assert sum(delays.counts) == 20


@pytest.mark.parametrize("native", [True, False], ids=["c-loop", "python-loop"])
def test_a_reader_counts_records_by_their_delay_until_it_shows_them(
    kafka_bootstrap: str, make_topic, tmp_path: Path, native: bool
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"old-{i}", {"i": i}) for i in range(50)])
    path = tmp_path / "s"
    with (
        GlobalStore(topic, kafka_bootstrap, path, native_restore=native) as writer,
        SharedStore(path).start(timeout=30) as reader,
    ):
        assert (reader.status().visible_delays or NONE).total == 0  # restored: not counted
        positions = produce(kafka_bootstrap, topic, [(f"new-{i}", {"i": i}) for i in range(20)])
        assert reader.wait_for(positions, 30) and reader["new-19"] == {"i": 19}

        def applied_now() -> Delays:
            return writer.status().record_delays or NONE

        def visible() -> Delays:
            return reader.status().visible_delays or NONE

        # The writer counts a batch just after committing it, and its note to readers may
        # come just after a query showed the batch: both counts may trail the data.
        eventually(lambda: applied_now().total == 20, 5, applied_now)
        applied = applied_now()
        eventually(lambda: visible().total == applied.total, 5, visible)
        assert sum(visible().counts) == 20
        # Shown no sooner than applied, and within seconds of produce.
        assert applied.sum_seconds <= visible().sum_seconds < 5.0 * 20
