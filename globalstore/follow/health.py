"""What the store thread knows about the broker and the topic's end, from librdkafka's
statistics and error callbacks (both are served on the store thread, inside poll/consume).

A partition or a dead link often closes no connection: requests just get no answer, and
librdkafka still calls the broker UP until its request timeout. So a leader counts as
reached only while it answers: one that has sent nothing for `silence` seconds while the
store's requests wait for it is not (the store fetches with a short fetch.wait.max.ms, so
a broker that is there answers within it, records or none). When it last answered is the
store's own record, renewed only by a response (the statistics' count of them grew): after
a timeout librdkafka reconnects, and a new connection that has received nothing yet says
nothing of how long the broker has been silent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson
from confluent_kafka import KafkaError

from globalstore.config import StoreConfig
from globalstore.kafka.clients import LIBRDKAFKA_LOG, Refusals

__all__ = ["Health", "for_store", "silence_after"]

log = logging.getLogger(__name__)

_SILENCE_S = 3.0  # at the store's fetch.wait.max.ms (10 ms), 300 answers missed


def for_store(config: StoreConfig) -> Health:
    """The health of a store's consumer: its refusals noticed, its silence bound set."""
    refusals = Refusals(config.bootstrap_servers, config.kafka_config)
    return Health(config.topic, refusals, silence_after(config))


def silence_after(config: StoreConfig) -> float:
    """Seconds without an answer after which a leader with requests waiting is not heard:
    3, or twice fetch.wait.max.ms where the store's kafka_config sets it higher."""
    wait_ms = float(config.consumer_config().get("fetch.wait.max.ms", 500))
    return max(_SILENCE_S, 2 * wait_ms / 1000)


class Health:
    """Connection state and the topic's end offsets as last reported. Mutated only by the
    store thread; others read the immutable snapshot the thread publishes."""

    def __init__(self, topic: str, refusals: Refusals, silence: float = _SILENCE_S) -> None:
        self.topic = topic
        self.refusals = refusals  # refused credentials or certificates, kept apart
        self.silence = silence  # seconds: a leader silent this long is not heard
        self._silent: set[int] = set()  # the leaders not heard at the last statistics
        # {broker: (responses received, monotonic time it last answered)}
        self._answered: dict[int, tuple[int, float]] = {}
        self.high: dict[int, int] = {}
        self.connected = False
        self.ever_connected = False
        self.in_sync_at: float | None = None  # monotonic time we last saw lag 0 while connected
        self.last_error: str | None = None

    def callbacks(self) -> dict[str, Any]:
        """The consumer settings that report to this health (and librdkafka's log lines to
        Python logging)."""
        return {"stats_cb": self.on_stats, "error_cb": self.on_error, "logger": LIBRDKAFKA_LOG}

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
        """Raise the known end offset of `partition` to `end`; never lowers it."""
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
        brokers = stats.get("brokers", {}).values()
        now = time.monotonic()
        answered = {b.get("nodeid"): self._answered_at(b, now) for b in brokers}
        up = {b.get("nodeid") for b in brokers if b.get("state") == "UP"}
        silent = [
            b
            for b in brokers
            if b.get("nodeid") in leaders and self._quiet(b, now - answered[b.get("nodeid")])
        ]
        self.connected = bool(leaders) and leaders <= up and not silent
        if self.connected:
            self.ever_connected = True
        if silent:
            self.last_error = "; ".join(
                self._silence(b, now - answered[b.get("nodeid")], parts) for b in silent
            )
        for broker in silent:
            # It did not hold the end while it heard nothing, though it looked as if it did.
            if self.in_sync_at is not None:
                self.in_sync_at = min(self.in_sync_at, answered[broker.get("nodeid")])
        if {b.get("nodeid") for b in silent} - self._silent:
            log.warning("kafka: %s", self.last_error)  # once, as a leader falls silent
        self._silent = {b.get("nodeid") for b in silent}

    def _answered_at(self, broker: Mapping[str, Any], now: float) -> float:
        """When `broker` last answered: at its last receive if a response came since the last
        statistics; else as known, or earlier if its connection has been idle longer."""
        node, responses = broker.get("nodeid", -1), broker.get("rx", 0)
        idle = broker.get("rxidle", -1)
        received = now - idle / 1e6 if idle >= 0 else now
        known = self._answered.get(node)
        if known is not None and responses <= known[0]:
            received = min(known[1], received)
        self._answered[node] = (responses, received)
        return received

    def _quiet(self, broker: Mapping[str, Any], silent_s: float) -> bool:
        """Requests wait for the broker, and it has sent nothing for `silence` seconds."""
        waiting = broker.get("waitresp_cnt", 0) + broker.get("outbuf_cnt", 0)
        return bool(waiting > 0 and silent_s >= self.silence)

    def _silence(self, broker: Mapping[str, Any], silent_s: float, parts: Mapping[str, Any]) -> str:
        node = broker.get("nodeid")
        led = sorted(int(n) for n, p in parts.items() if int(n) >= 0 and p.get("leader") == node)
        return (
            f"broker {node} ({broker.get('name')}) has answered nothing for {silent_s:.0f}s "
            f"while {broker.get('waitresp_cnt', 0)} requests wait: waiting for partitions "
            f"{led} of {self.topic}, which it leads"
        )

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback: keeps the error for status, and marks the store disconnected
        when every broker is down or the transport failed."""
        self.last_error = str(err)
        self.refusals(err)
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self.connected = False
        # Transient as a rule (librdkafka reconnects); status() reports connection and staleness.
        log.info("kafka: %s", err)
