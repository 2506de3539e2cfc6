"""What the store thread concludes from librdkafka's statistics: a leader that answers is
reached; one that has answered nothing for `silence` seconds while requests wait for it is
not (a partition that closes no connection), and last_error names it and the partitions it
leads; a broker that is merely idle, with nothing asked of it, is still reached."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from globalstore.config import StoreConfig
from globalstore.follow.health import Health, silence_after
from globalstore.kafka.clients import Refusals

TOPIC = "t"


def _stats(
    rxidle_s: float, waiting: int, leaders: tuple[int, ...] = (1, 2), responses: int = 1
) -> str:
    """Statistics as librdkafka sends them: partitions with their leaders and offsets, and
    the brokers (all UP) with broker 2's receive idle time (-1: nothing received on its
    connection), requests in flight and responses received so far."""
    partitions: dict[str, Any] = {
        str(p): {"leader": leader, "ls_offset": 10 * (p + 1)} for p, leader in enumerate(leaders)
    }
    partitions["-1"] = {"leader": -1}  # librdkafka's internal UA partition
    brokers = {
        f"127.0.0.1:{9000 + n}/{n}": {
            "nodeid": n,
            "name": f"127.0.0.1:{9000 + n}/{n}",
            "state": "UP",
            "rxidle": int(rxidle_s * 1e6) if n == 2 and rxidle_s >= 0 else -1 if n == 2 else 5_000,
            "rx": responses if n == 2 else 1,
            "waitresp_cnt": waiting if n == 2 else 1,
            "outbuf_cnt": 0,
        }
        for n in (1, 2, 3)
    }
    stats = {"topics": {TOPIC: {"partitions": partitions}}, "brokers": brokers}
    return orjson.dumps(stats).decode()


def _health() -> Health:
    return Health(TOPIC, Refusals("b:1", {}), silence=3.0)


def test_leaders_that_answer_are_reached_and_give_the_topic_end() -> None:
    health = _health()
    health.on_stats(_stats(rxidle_s=0.01, waiting=1))
    assert health.connected and health.ever_connected
    assert health.high == {0: 10, 1: 20}
    assert health.last_error is None


def test_a_leader_silent_while_requests_wait_is_not_reached_and_is_named() -> None:
    health = _health()
    health.on_stats(_stats(rxidle_s=0.01, waiting=1))
    assert health.track_sync(time.monotonic(), {0: 10, 1: 20})  # as it looked then
    health.on_stats(_stats(rxidle_s=4.2, waiting=1))
    assert not health.connected and health.ever_connected
    # In sync no later than it last heard the leader: its staleness counts from there.
    assert health.in_sync_at is not None and time.monotonic() - health.in_sync_at >= 4.2
    assert health.last_error is not None
    assert "broker 2 (127.0.0.1:9002/2) has answered nothing for 4s" in health.last_error
    assert f"partitions [1] of {TOPIC}" in health.last_error
    health.on_stats(_stats(rxidle_s=0.01, waiting=1, responses=2))  # it answers again
    assert health.connected


def test_a_silent_leader_reconnected_is_not_heard_until_it_answers() -> None:
    """librdkafka times a silent connection out and opens another, which has received
    nothing: that says nothing of how long the broker has been silent."""
    health = _health()
    health.on_stats(_stats(rxidle_s=0.01, waiting=1))
    health.on_stats(_stats(rxidle_s=4.2, waiting=1))
    assert not health.connected
    health.on_stats(_stats(rxidle_s=-1, waiting=1))  # a new connection, nothing received
    assert not health.connected
    assert "has answered nothing for 4s" in (health.last_error or "")
    health.on_stats(_stats(rxidle_s=0.002, waiting=1, responses=2))  # an answer on it
    assert health.connected


def test_an_idle_broker_with_nothing_asked_of_it_is_still_reached() -> None:
    health = _health()
    health.on_stats(_stats(rxidle_s=60.0, waiting=0))
    assert health.connected and health.last_error is None


def test_a_silent_broker_that_leads_nothing_of_the_topic_does_not_matter() -> None:
    health = _health()
    health.on_stats(_stats(rxidle_s=60.0, waiting=3, leaders=(1, 3)))
    assert health.connected and health.last_error is None


def test_the_silence_bound_follows_a_longer_fetch_wait(tmp_path: Path) -> None:
    assert silence_after(StoreConfig(TOPIC, "b:1", tmp_path)) == 3.0
    slow = StoreConfig(TOPIC, "b:1", tmp_path, kafka_config={"fetch.wait.max.ms": 5000})
    assert silence_after(slow) == 10.0
