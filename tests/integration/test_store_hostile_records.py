"""Records no producer following the topic contract writes, produced with the exact bytes a
hostile or buggy one sends (librdkafka's C API, tests/raw_records.py): none of them stops a
store, in the C loop or the Python loop, restoring or following. Each is held as an invalid
value (reads say why and where) or quarantined, and the good records around it are exact."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from globalstore import GlobalStore, InvalidValue
from globalstore.codec import (
    VALUE_FORMAT_HEADER,
    VALUE_FORMAT_VERSION,
    format_headers,
    value_format,
)
from tests.conftest import TopicFactory
from tests.raw_records import RawProducer, RawRecord

pytestmark = pytest.mark.session_broker

_FORMAT = (VALUE_FORMAT_HEADER.encode(), str(VALUE_FORMAT_VERSION).encode())
_NOT_UTF8 = b"\xff\xfe"


def _good(key: str, n: int) -> RawRecord:
    return 0, key.encode(), orjson.dumps({"n": n}), [_FORMAT]


def _poison(key: str) -> RawRecord:
    """The record the review found: a header named with bytes that are not UTF-8."""
    return 0, key.encode(), orjson.dumps({"poison": True}), [_FORMAT, (_NOT_UTF8, b"x")]


@pytest.mark.parametrize("loop", ["c", "python"])
@pytest.mark.parametrize("invalid_values", ["store", "quarantine"])
def test_a_header_name_that_is_not_utf8_never_stops_a_store(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, loop: str, invalid_values: str
) -> None:
    topic = make_topic(partitions=1)
    with RawProducer(kafka_bootstrap) as raw:
        raw.produce(topic, [_good("a", 1), _good("b", 2), _good("c", 3), _poison("bad"),
                            _good("d", 4), _good("e", 5), _good("f", 6)])  # fmt: skip
        with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", invalid_values=invalid_values,
                         native_restore=loop == "c").start(timeout=60) as store:  # fmt: skip
            assert store.status().state == "running"
            assert dict(store.items()) == {k: {"n": n} for n, k in enumerate("abcdef", 1)}
            _assert_held(store, invalid_values, "bad", offset=3)
            # Following: another one, then good records behind it are applied.
            raw.produce(topic, [_poison("bad2"), _good("g", 7)])
            assert store.wait_for({0: 9}, timeout=30), store.status()
            assert store.get("g") == {"n": 7}
            _assert_held(store, invalid_values, "bad2", offset=7)
            assert store.status().state == "running"


def _assert_held(store: GlobalStore, invalid_values: str, key: str, offset: int) -> None:
    if invalid_values == "quarantine":
        assert store.get(key) is None
        [held] = [q for q in store.quarantined() if q.key == key]
        assert (held.partition, held.offset) == (0, offset)
        assert "header names not UTF-8" in held.reason
        return
    with pytest.raises(InvalidValue, match="header names not UTF-8") as info:
        store.get(key)
    assert (info.value.partition, info.value.offset) == (0, offset)


def _random_record(rng: random.Random, n: int) -> RawRecord:
    """A record of random shape: a key of any bytes (often a good one), 0-4 headers with
    names of any bytes but NUL, the format header or not, a value that is JSON or not."""
    key = rng.choice([f"k{rng.randrange(40)}".encode(), rng.randbytes(rng.randrange(0, 6))])
    headers: list[tuple[bytes, bytes | None]] = []
    for _ in range(rng.randrange(5)):
        name = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(0, 5)))
        headers.append((name, rng.choice([None, b"", rng.randbytes(3), b"1"])))
    if rng.random() < 0.6:
        headers.insert(rng.randrange(len(headers) + 1), _FORMAT)
    value = rng.choice([orjson.dumps({"n": n}), orjson.dumps({"n": n}), None,
                        rng.randbytes(rng.randrange(0, 8))])  # fmt: skip
    return 0, key, value, headers


def _expected(records: list[RawRecord]) -> tuple[dict[str, object], set[str]]:
    """What the store must hold after `records`, by the topic contract's rules: the good
    values, and the keys whose latest record is held as an invalid value."""
    good: dict[str, object] = {}
    invalid: set[str] = set()
    for _, raw_key, value, headers in records:
        if raw_key is None:
            continue
        try:
            key = raw_key.decode()
        except UnicodeDecodeError:
            continue  # skipped: a key no query can name
        good.pop(key, None)
        invalid.discard(key)
        if value is None:
            continue
        try:
            named = [(name.decode(), content) for name, content in headers]
            readable = value_format(named) == VALUE_FORMAT_VERSION
            good[key] = orjson.loads(value) if readable else None
        except (UnicodeDecodeError, orjson.JSONDecodeError):
            readable = False
        if not readable:
            good.pop(key, None)
            invalid.add(key)
    return good, invalid


@pytest.mark.parametrize("loop", ["c", "python"])
def test_random_keys_and_headers_leave_the_store_ready_and_exact(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, loop: str
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    records = [_random_record(rng, n) for n in range(600)]
    topic = make_topic(partitions=1)
    with RawProducer(kafka_bootstrap) as raw:
        raw.produce(topic, records[:400])
        with GlobalStore(topic, kafka_bootstrap, tmp_path / "s",
                         native_restore=loop == "c").start(timeout=60) as store:  # fmt: skip
            raw.produce(topic, records[400:])  # the rest while following
            assert store.wait_for({0: len(records)}, timeout=30), (seed, store.status())
            good, invalid = _expected(records)
            errors: list[InvalidValue] = []
            assert dict(store.items(on_invalid=errors.append)) == good, seed
            assert {e.key for e in errors} == invalid, seed
            assert store.status().state == "running", seed


_BIG = 10 << 20  # past the store's fetch sizes (2 MiB, 256 KiB a partition) and its queue
# (4 MiB a partition)


@pytest.mark.parametrize("loop", ["c", "python"])
def test_a_record_larger_than_the_store_fetches_is_applied_exactly(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, loop: str
) -> None:
    topic = make_topic(partitions=1, config={"max.message.bytes": str(3 * _BIG)})
    big = {"blob": "x" * _BIG}
    sender = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 3 * _BIG})

    def send(*records: tuple[str, object]) -> None:
        for key, value in records:
            sender.produce(topic, key=key, value=orjson.dumps(value), headers=format_headers())
        assert sender.flush(60) == 0

    send(("a", {"n": 1}), ("big", big), ("b", {"n": 2}))
    # And past the follower's batch bound in bytes, lowered to 1 MiB here.
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", native_restore=loop == "c",
                     follow_batch_max_bytes=1 << 20).start(timeout=120) as store:  # fmt: skip
        assert store.get("big") == big and store.get("b") == {"n": 2}
        send(("big2", big), ("c", {"n": 3}))  # following
        assert store.wait_for({0: 5}, timeout=60), store.status()
        assert store.get("big2") == big and store.get("c") == {"n": 3}
        assert store.status().state == "running" and store.status().ready
