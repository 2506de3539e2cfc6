"""What the store thread knows about the broker and the topic's end, from librdkafka's
statistics and error callbacks (both are served on the store thread, inside poll/consume)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson
from confluent_kafka import KafkaError

from globalstore.kafka.clients import Refusals

__all__ = ["Health"]

log = logging.getLogger(__name__)


class Health:
    """Connection state and the topic's end offsets as last reported. Mutated only by the
    store thread; others read the immutable snapshot the thread publishes."""

    def __init__(self, topic: str, refusals: Refusals) -> None:
        self.topic = topic
        self.refusals = refusals  # refused credentials or certificates, kept apart
        self.high: dict[int, int] = {}
        self.connected = False
        self.ever_connected = False
        self.in_sync_at: float | None = None  # monotonic time we last saw lag 0 while connected
        self.last_error: str | None = None

    def reached(self) -> None:
        """A broker request succeeded."""
        self.connected = self.ever_connected = True

    def track_sync(self, now: float, positions: Mapping[int, int]) -> bool:
        """Whether the store holds the topic's end while connected; if so, in sync at `now`."""
        if not self.connected or any(positions.get(p, 0) < hi for p, hi in self.high.items()):
            return False
        self.in_sync_at = now
        return True

    def raise_high(self, partition: int, end: int) -> None:
        self.high[partition] = max(self.high.get(partition, 0), end)

    def on_stats(self, raw: str) -> None:
        """librdkafka statistics (every statistics.interval.ms): end offsets, broker states."""
        stats = orjson.loads(raw)
        parts = stats.get("topics", {}).get(self.topic, {}).get("partitions", {})
        if not parts:
            # A consumer with the topic unassigned (the thread's, while the C loop consumes)
            # knows nothing of its partitions: no news, not a lost connection.
            return
        leaders = set()
        for name, p in parts.items():
            pid = int(name)
            if pid < 0:
                continue
            leaders.add(p.get("leader", -1))
            # ls_offset: the end a read_committed consumer can reach.
            end = p.get("ls_offset", -1)
            if end is not None and end >= 0:
                self.raise_high(pid, end)
        up = {b.get("nodeid") for b in stats.get("brokers", {}).values() if b.get("state") == "UP"}
        self.connected = bool(leaders) and leaders <= up
        if self.connected:
            self.ever_connected = True

    def on_error(self, err: KafkaError) -> None:
        self.last_error = str(err)
        self.refusals(err)
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self.connected = False
        # Transient as a rule (librdkafka reconnects); status() reports connection and staleness.
        log.info("kafka: %s", err)
