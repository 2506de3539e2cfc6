"""Memory stays within budget however large the topic: a cold restore of a topic several
times the consumer's prefetch cap peaks below the documented budget (docs/store.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from globalstore import StoreConfig
from tests.integration.store_support import produce

CHILD = Path(__file__).with_name("restore_rss.py")
REPO = Path(__file__).resolve().parents[2]
BUDGET_MB = 300  # peak RSS of a store-only process, docs/store.md "Memory"
VALUE_PAD = 200
# Several times the consumer's prefetch cap, and more than RocksDB's memtables hold (3 x 32 MB),
# so neither the fetch queue nor the memtables could hide a leak that grows with the topic.
TOPIC_BYTES = 150 << 20


@pytest.mark.timeout(600)
def test_a_restore_several_times_the_queue_cap_stays_within_budget(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=6)
    config = StoreConfig(topic=topic, bootstrap_servers=kafka_bootstrap, path=tmp_path / "s")
    cap_bytes = int(config.consumer_config()["queued.max.messages.kbytes"]) * 1024
    assert 4 * cap_bytes <= TOPIC_BYTES, "the topic must be several times the queue cap"
    records = TOPIC_BYTES // VALUE_PAD
    produce(kafka_bootstrap, topic, ((f"k{i:08d}", {"p": "x" * VALUE_PAD}) for i in range(records)))

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    out = subprocess.run(
        [sys.executable, str(CHILD), kafka_bootstrap, topic, str(tmp_path / "s")],
        check=False, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["records"] == records, result
    assert result["peak_rss_mb"] <= BUDGET_MB, (
        f"restoring {records:,} records ({TOPIC_BYTES >> 20} MB, queue cap {cap_bytes >> 20} MB) "
        f"peaked at {result['peak_rss_mb']:.0f} MB, above the {BUDGET_MB} MB budget"
    )
