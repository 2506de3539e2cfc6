"""Broker down while following: keep serving the last state, report staleness, reconnect.

The shared test broker cannot be stopped, so this test runs its own broker (LocalKafka) in a
temporary directory and stops/starts it under the store.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from globalstore import GlobalStore, StoreConfig
from globalstore.localkafka import ANY_PORT, LocalKafka, PortInUseError
from tests.integration.store_support import produce
from tests.waiting import eventually


def _restart_on_its_port(broker: LocalKafka, timeout: float) -> None:
    """Start the broker again on the port the store's bootstrap names. While it was down, a
    client connection may have been given that port as its own ephemeral one: wait for it
    to be released rather than fail."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            broker.start(timeout=max(1.0, deadline - time.monotonic()))
            return
        except PortInUseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_store_keeps_serving_and_reconnects(tmp_path: Path) -> None:
    broker = LocalKafka(port=ANY_PORT, data_dir=tmp_path / "broker", heap="384m")
    bootstrap = broker.start(fresh=True, timeout=120)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("outage", 2, 1, config={"cleanup.policy": "compact"})])[
            "outage"
        ].result(timeout=30)
        produce(bootstrap, "outage", [("a", 1), ("b", 2)])
        config = StoreConfig(
            topic="outage",
            bootstrap_servers=bootstrap,
            path=tmp_path / "s",
            kafka_config={"reconnect.backoff.max.ms": 500},
        )
        with GlobalStore.from_config(config) as store:
            assert store.status().connected
            assert store.status().staleness_seconds == 0.0

            broker.stop()
            eventually(lambda: not store.status().connected, 30, store.status)  # noticed
            time.sleep(1.5)
            status = store.status()
            assert status.state == "running" and status.ready
            assert status.staleness_seconds is not None and status.staleness_seconds >= 1.0
            assert status.last_error is not None
            assert store.get("a") == 1 and store.count() == 2  # still serving

            _restart_on_its_port(broker, 120)
            produce(bootstrap, "outage", [("c", 3)])
            eventually(lambda: store.get("c") == 3, 60, store.status)  # produced after restart
            eventually(lambda: store.status().connected, 30, store.status)  # reconnected
            eventually(lambda: store.status().staleness_seconds == 0.0, 30, store.status)
    finally:
        broker.stop()
