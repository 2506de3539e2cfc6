"""Freshness as a distribution on a real broker: records followed are counted by their delay
from their timestamp to being applied, by the C loop and by the Python loop alike; records
restored are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from globalstore import GlobalStore
from globalstore.follow.topic import end_offsets
from globalstore.status import Delays
from tests.integration.store_support import produce

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
