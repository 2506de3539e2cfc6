"""A realistic raw order-event stream, shared by the tests, the benchmark and the demo.

Couriers pick orders up and move toward the drop-off; most orders are delivered, some
cancelled, some still under way. Events reach the topic out of order (each one is delayed
by a random transport lag), some are sent twice, some ended orders get a stray event after
their end (a courier app still pinging), event_time comes as ISO-8601 text or as epoch
milliseconds, and a few records are broken on purpose, each labelled with the dead-letter
reason the pipeline must give it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message, Producer

from globalstore.kafka.clients import Refusals, create_client
from pipelines.clients import client_config
from pipelines.spec import DEFAULT_MAX_RECORD_BYTES

CITY = (52.52, 13.405)  # pickups and drop-offs scatter around this point
FLUSH_TIMEOUT_S = 60.0
_PRODUCER_DEFAULTS = {
    "linger.ms": 20,
    "compression.type": "lz4",
    # "In order" holds through retries: a retried batch never lands after a later one.
    "enable.idempotence": True,
}


@dataclass(frozen=True)
class RawRecord:
    """One raw record as produced, and why the pipeline must dead-letter it (if it must)."""

    key: bytes | None
    value: bytes
    bad_reason: str | None = None  # the reason the pipeline must dead-letter it with


@dataclass(frozen=True)
class StreamShape:
    """The size and timing of a generated stream of order events."""

    orders: int = 1000
    couriers: int = 200
    start_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    order_spacing_ms: int = 1_000
    max_moves: int = 6
    delivered: float = 0.7
    cancelled: float = 0.1
    max_lag_ms: int = 120_000  # transport delay: how far events get out of order
    duplicates: float = 0.03
    strays: float = 0.1  # share of ended orders that get one more event after the end
    epoch_millis: float = 0.3  # share of events whose event_time is epoch ms, not ISO text
    bad_every: int = 50  # one broken record per this many good ones (0: none)


def iso_utc(millis: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC text with milliseconds and Z."""
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def generate(shape: StreamShape, seed: int = 0, first_order: int = 0) -> list[RawRecord]:
    """The raw stream in arrival order (good, duplicated and broken records mixed)."""
    rng = random.Random(seed)
    arrivals: list[tuple[int, RawRecord]] = []
    for number in range(first_order, first_order + shape.orders):
        for event in order_events(rng, shape, number):
            arrival = event["_ms"] + rng.randrange(shape.max_lag_ms + 1)
            record = _encode(event, as_millis=rng.random() < shape.epoch_millis)
            arrivals.append((arrival, record))
            if rng.random() < shape.duplicates:
                arrivals.append((arrival + rng.randrange(shape.max_lag_ms + 1), record))
    arrivals.sort(key=lambda pair: pair[0])
    return _with_broken_records([record for _, record in arrivals], shape.bad_every, rng)


def order_events(rng: random.Random, shape: StreamShape, number: int) -> list[dict[str, Any]]:
    """One order's events in event-time order (with an internal `_ms` timestamp)."""
    order_id = f"o-{number:07d}"
    courier = f"c-{rng.randrange(shape.couriers):04d}"
    lat, lon = _near_city(rng)
    to_lat, to_lon = _near_city(rng)
    t = shape.start_ms + number * shape.order_spacing_ms
    steps = [("CREATED", lat, lon)]
    outcome = rng.random()
    if outcome < shape.cancelled:
        steps.append(("CANCELLED", lat, lon))
    else:
        moves = rng.randint(1, shape.max_moves)
        steps.append(("PICKED_UP", lat, lon))
        for i in range(1, moves + 1):
            f = i / (moves + 1)
            steps.append(("IN_TRANSIT", lat + (to_lat - lat) * f, lon + (to_lon - lon) * f))
        if outcome < shape.cancelled + shape.delivered:
            steps.append(("DELIVERED", to_lat, to_lon))
        else:  # still under way: drop a random tail of the journey
            steps = steps[: rng.randint(1, len(steps))]
    if steps[-1][0] in ("DELIVERED", "CANCELLED") and rng.random() < shape.strays:
        steps.append(("IN_TRANSIT", steps[-1][1], steps[-1][2]))  # a ping after the end
    events = []
    for status, at_lat, at_lon in steps:
        t += rng.randint(20_000, 90_000)
        events.append(
            {"order_id": order_id, "courier_id": courier, "status": status,
             "lat": round(at_lat, 6), "lon": round(at_lon, 6), "event_time": iso_utc(t), "_ms": t}
        )  # fmt: skip
    return events


def _near_city(rng: random.Random) -> tuple[float, float]:
    return CITY[0] + rng.uniform(-0.1, 0.1), CITY[1] + rng.uniform(-0.15, 0.15)


def _encode(event: dict[str, Any], as_millis: bool = False) -> RawRecord:
    body = {k: v for k, v in event.items() if not k.startswith("_")}
    if as_millis:
        body["event_time"] = event["_ms"]
    return RawRecord(event["order_id"].encode(), orjson.dumps(body))


def broken_records(order_id: str = "o-broken") -> list[RawRecord]:
    """One record per way a raw record can be bad, each with its expected reason."""
    good = {"order_id": order_id, "courier_id": "c-0001", "status": "IN_TRANSIT",
            "lat": 52.5, "lon": 13.4, "event_time": "2026-01-01T00:00:00.000Z"}  # fmt: skip

    def variant(reason: str, **changes: Any) -> RawRecord:
        body = {k: v for k, v in {**good, **changes}.items() if v is not _MISSING}
        return RawRecord(order_id.encode(), orjson.dumps(body), reason)

    return [
        RawRecord(order_id.encode(), b'{"order_id": "o-1", "status": ', "not_json"),
        RawRecord(order_id.encode(), b"[1, 2, 3]", "not_object"),
        variant("missing:lat", lat=_MISSING),
        variant("missing:courier_id", courier_id=None),
        variant("wrong_type:lat", lat="52.5"),
        variant("wrong_type:order_id", order_id=17),
        variant("unknown_status", status="LOST"),
        variant("lat_out_of_range", lat=91.5),
        variant("lon_out_of_range", lon=-180.5),
        variant("bad_timestamp:event_time", event_time="yesterday"),
        variant("wrong_type:event_time", event_time=1.767225600e12),
        variant("future_timestamp", event_time="2999-01-01T00:00:00.000Z"),
        variant("future_timestamp", event_time=32_503_680_000_000),  # 3000-01-01, epoch ms
        variant("empty:order_id", order_id=""),
        variant("oversize", note="x" * DEFAULT_MAX_RECORD_BYTES),
    ]


_MISSING = object()


def _with_broken_records(
    records: list[RawRecord], every: int, rng: random.Random
) -> list[RawRecord]:
    if every <= 0:
        return records
    kinds = broken_records()
    mixed: list[RawRecord] = []
    for i, record in enumerate(records):
        mixed.append(record)
        if i % every == every - 1:
            mixed.append(rng.choice(kinds))
    return mixed


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[RawRecord],
    kafka_config: Mapping[str, str] | None = None,
) -> int:
    """Write records in order; return how many. Batched for throughput, flushed at the end.
    `kafka_config`: client settings with librdkafka's names (security)."""
    refusals = Refusals(bootstrap_servers, kafka_config or {})
    producer = create_client(Producer, client_config(refusals, _PRODUCER_DEFAULTS), "producer")
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(str(error))

    count = 0
    for record in records:
        while True:
            try:
                producer.produce(topic, record.value, record.key, on_delivery=delivered)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
                refusals.check()
        count += 1
    undelivered = _flush(producer, refusals)
    if undelivered or failures:
        raise RuntimeError(
            f"{undelivered + len(failures)} of {count} records to {topic!r} were not delivered"
            + (f" (first error: {failures[0]})" if failures else "")
        )
    return count


def _flush(producer: Producer, refusals: Refusals) -> int:
    """Deliver what is queued within FLUSH_TIMEOUT_S; the records left. A refusal of the
    credentials ends it at once (as an AuthenticationError), not after the whole wait."""
    deadline = time.monotonic() + FLUSH_TIMEOUT_S
    while True:
        left = producer.flush(1.0)
        refusals.check()
        if not left or time.monotonic() > deadline:
            return left
