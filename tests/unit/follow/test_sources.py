"""The consumer source: consumed messages become plain records for the storage, the consumer's
events (errors, partition ends) stay with the thread, and a partition end is an offset reached."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from globalstore.codec import UNREADABLE_HEADERS, format_headers, origin
from globalstore.config import StoreConfig
from globalstore.follow.consumer_source import ConsumerSource, split
from globalstore.storage import Storage
from tests.unit.store_fakes import Err, Msg, messages


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(tmp_path / "db")
    s.initialise("t", None, 1)
    yield s
    s.close()


class _OneBatch:
    """A consumer whose next consume() returns `batch`, then nothing."""

    def __init__(self, batch: list[Any]) -> None:
        self.batch = batch

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        out, self.batch = self.batch, []
        return out


def _source(batch: list[Any], tmp_path: Path) -> ConsumerSource:
    config = StoreConfig("t", "fake:1", tmp_path, native_restore=False)
    return ConsumerSource(_OneBatch(batch), config, exact_count=True, list_keys=True)


def test_split_makes_records_and_keeps_the_events_apart() -> None:
    failure = Msg(None, None, 1, 99, err=Err(KafkaError._TRANSPORT))
    eof0 = Msg(None, None, 0, 9, err=Err(KafkaError._PARTITION_EOF))
    eof0_later = Msg(None, None, 0, 12, err=Err(KafkaError._PARTITION_EOF))
    eof2 = Msg(None, None, 2, 0, err=Err(KafkaError._PARTITION_EOF))
    tombstone = Msg(b"b", None, 0, 8, ts=7)
    batch = [*messages(("a", "1"), start=5, fmt=1), failure, tombstone, eof0, eof0_later, eof2]
    records, ends, events = split(batch)
    assert len(records) == 2
    assert list(records) == [
        (b"a", b"1", format_headers(1), 0, 5, 1_000),
        (b"b", None, None, 0, 8, 7),
    ]
    assert list(records) == list(records)  # made anew each time they are read
    assert events == [failure, eof0, eof0_later, eof2]  # in the order they came
    assert ends == {0: 12, 2: 0}  # the furthest end of each partition; errors are none


def test_a_batch_without_events_is_all_records() -> None:
    records, ends, events = split(messages(("a", "1"), ("b", "2"), p=3))
    assert [r[:2] for r in records] == [(b"a", b"1"), (b"b", b"2")] and len(records) == 2
    assert ends == {} and events == []
    records, ends, events = split([])
    assert len(records) == 0 and list(records) == [] and ends == {} and events == []


@dataclass
class _Headed(Msg):
    """As confluent-kafka's Message; with `bad_name`, a header name that is not UTF-8: a
    checked call of its headers() raises SystemError (the UnicodeDecodeError is its cause)."""

    bad_name: bool = False

    def headers(self) -> list[tuple[str, bytes]] | None:
        if self.bad_name:
            raise SystemError("<method 'headers'> returned a result with an exception set")
        return super().headers()


def test_a_message_whose_headers_cannot_be_read_declares_an_unreadable_format() -> None:
    batch = [_Headed(k, b"{}", 0, o, fmt=1, bad_name=k in (b"b", b"d")) for o, k in
             enumerate([b"a", b"b", b"c", b"d"])]  # fmt: skip
    records, _, _ = split(batch)
    assert [(r[0], r[2], r[4]) for r in records] == [
        (b"a", format_headers(1), 0),
        (b"b", UNREADABLE_HEADERS, 1),
        (b"c", format_headers(1), 2),
        (b"d", UNREADABLE_HEADERS, 3),
    ]


def test_the_source_applies_records_and_hands_the_events_on(
    storage: Storage, tmp_path: Path
) -> None:
    # Offsets 2..4 hold a transaction marker and aborted records: never delivered, yet the
    # consumer reached offset 5 of partition 0, and so did the store.
    failure = Msg(None, None, 0, 99, err=Err(KafkaError._TRANSPORT))
    eof = Msg(None, None, 0, 5, err=Err(KafkaError._PARTITION_EOF))
    batch = [*messages(("a", "1"), ("b", None)), failure, eof]
    done = _source(batch, tmp_path).apply(storage, 3)
    applied = done.applied
    assert applied.records == 2 and done.events == [failure, eof]
    assert applied.present == {b"a": True, b"b": False}
    raw = storage.get(b"a")
    assert raw is not None and origin(raw) == (1_000, 0, 0) and storage.get(b"b") is None
    assert storage.state.positions == {0: 5} and storage.read_meta().offsets == {0: 5}
    assert storage.state.count == 1


def test_an_end_already_reached_writes_nothing(storage: Storage, tmp_path: Path) -> None:
    eof = Msg(None, None, 0, 4, err=Err(KafkaError._PARTITION_EOF))
    assert _source([eof], tmp_path).apply(storage, 2).events == [eof]
    assert storage.read_meta().offsets == {0: 4} and storage.read_meta().applied_at_ms == 2
    again = _source([eof], tmp_path).apply(storage, 3)
    assert again.applied.records == 0 and again.events == [eof]
    assert storage.read_meta().applied_at_ms == 2
