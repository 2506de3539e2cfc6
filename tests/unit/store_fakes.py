"""Records for unit tests of the storage layer, and stand-ins for consumed Kafka messages and
for the consumer itself, for unit tests of the sources and the store thread (no broker), and
for a RocksDB handle on a full disk."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError

from globalstore.codec import format_headers
from globalstore.config import IndexFn, ValueCache
from globalstore.converters import ValueFormats
from globalstore.read.copy import Copy
from globalstore.storage import Applied, Record, Storage
from globalstore.storage.records import fill

PARTITION_EOF = KafkaError._PARTITION_EOF
AUTO_OFFSET_RESET = KafkaError._AUTO_OFFSET_RESET


@dataclass
class Err:
    """A consumer event's error: only its code matters to the store."""

    kind: int

    def code(self) -> int:
        return self.kind


@dataclass
class Msg:
    k: bytes | None
    v: bytes | None
    p: int = 0
    o: int = 0
    ts: int = 1_000
    err: Any = None
    fmt: int | None = None  # the value format header, if the record declares one

    def error(self) -> Any:
        return self.err

    def __len__(self) -> int:  # as confluent-kafka's Message: its value's length
        return 0 if self.v is None else len(self.v)

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def timestamp(self) -> tuple[int, int]:
        return (1, self.ts)

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None if self.fmt is None else format_headers(self.fmt)


def batch(
    *records: tuple[str, str | None], p: int = 0, start: int = 0, fmt: int | None = None
) -> list[Record]:
    """Records for Storage.apply: (key, value) pairs at consecutive offsets of partition p."""
    return [
        (m.key(), m.value(), m.headers(), m.partition(), m.offset(), m.timestamp()[1])
        for m in messages(*records, p=p, start=start, fmt=fmt)
    ]


def messages(
    *records: tuple[str, str | None], p: int = 0, start: int = 0, fmt: int | None = None
) -> list[Msg]:
    """The same records as consumed messages, for a consumer to return."""
    return [
        Msg(k.encode(), None if v is None else v.encode(), p, start + i, fmt=fmt)
        for i, (k, v) in enumerate(records)
    ]


class FakeConsumer:
    """A consumer over in-memory partitions of one topic, for unit tests of the store thread:
    what the thread calls of confluent-kafka's Consumer, with the end-of-partition events
    librdkafka sends (enable.partition.eof). Tests append records to `partitions` while it
    runs, add partitions, or set `out_of_range` to have the next read report it."""

    def __init__(self, topic: str, partitions: dict[int, list[Msg]]) -> None:
        self.topic = topic
        self.partitions = partitions
        self.positions: dict[int, int] = {}
        self._eof_sent: dict[int, int] = {}
        self.out_of_range: int | None = None  # a partition whose position the topic lost
        self.closed = False
        self._pending: list[Msg] = []  # read, not yet handed out by poll()

    def assign(self, partitions: list[Any]) -> None:
        self.positions = {tp.partition: tp.offset for tp in partitions}

    def incremental_assign(self, partitions: list[Any]) -> None:
        for tp in partitions:  # the store assigns new partitions from OFFSET_BEGINNING
            self.positions[tp.partition] = max(0, tp.offset)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        out, self._pending = self._pending, []
        if self.out_of_range is not None:
            p, self.out_of_range = self.out_of_range, None
            return [*out, Msg(None, None, p, self.positions.get(p, 0), err=Err(AUTO_OFFSET_RESET))]
        for p, position in sorted(self.positions.items()):
            records = self.partitions.get(p, [])
            taken = records[position : position + num_messages - len(out)]
            out.extend(taken)
            self.positions[p] = position + len(taken)
            if self.positions[p] == len(records) and self._eof_sent.get(p) != len(records):
                self._eof_sent[p] = len(records)
                out.append(Msg(None, None, p, len(records), err=Err(PARTITION_EOF)))
        if not out:
            time.sleep(min(max(timeout, 0), 0.005))  # an idle consumer waits a little
        return out

    def poll(self, timeout: float = -1) -> Msg | None:
        if not self._pending:
            self._pending = self.consume(1, timeout)  # a record may come with its EOF event
        return self._pending.pop(0) if self._pending else None

    def list_topics(self, topic: str, timeout: float = -1) -> Any:
        described = SimpleNamespace(partitions=dict.fromkeys(self.partitions), error=None)
        return SimpleNamespace(topics={self.topic: described})

    def close(self) -> None:
        self.closed = True


NO_SPACE = "IO error: No space left on device: While appending to file: /s/db/000004.log"


class FullDisk:
    """A RocksDB handle on a full disk: every write raises what rocksdict raises then, reads
    pass through, and close() closes and then reports its failed flush, as rocksdict does."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _full(self, *args: object, **kwargs: object) -> None:
        raise Exception(NO_SPACE)  # rocksdict raises a bare Exception

    put = delete = write = flush = _full

    def close(self) -> None:
        self._real.close()
        self._full()


class LikeTheCLoop:
    """A NativeBatch that writes `records` as the C loop does: as storage/records.py's fill,
    which the C loop matches record for record (test_native_restore.py)."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records

    def fill(  # type: ignore[no-untyped-def]
        self, put, delete, nexts, skipped, timeout, checked=None, shape=None, record_deletes=False
    ) -> int:
        # `checked` and `shape` not taken: every value goes through the checking put (and
        # the transform's), as the C loop's values it is unsure of do.
        records: Any = self.records
        if record_deletes:  # each delete given its record, as the C loop gives it
            records, delete = _given_records(self.records, delete)
        fill(put, delete, records, Applied(skipped=skipped), nexts, False)
        return len(self.records)


def _given_records(
    records: list[Record], delete_at: Callable[[bytes, int, int, int], object]
) -> tuple[Iterator[Record], Callable[[bytes], object]]:
    """`records`, each noted as fill() takes it, and a delete that gives `delete_at` the
    record noted."""
    current: list[Record] = []

    def noted() -> Iterator[Record]:
        for record in records:
            current[:] = [record]
            yield record

    def delete(key: bytes) -> object:
        _, _, _, p, o, ts = current[0]
        return delete_at(key, p, o, ts)

    return noted(), delete


class OneCopy:
    """A store source over one Storage open already (read/source.py), for unit tests of the
    queries: what a ready store reads from, nothing that starts, follows or waits."""

    def __init__(
        self,
        storage: Storage,
        topic: str,
        cache: ValueCache | None = None,
        index_fns: Mapping[str, IndexFn] | None = None,
    ) -> None:
        self.topic, self.path = topic, storage.path
        self._copy = Copy(storage, ValueFormats(), topic, cache, index_fns)

    def copy(self) -> Copy:
        return self._copy

    def serving(self) -> Copy:
        return self._copy

    def scan(self, open_scan: Callable[[Copy], Iterator[Any]]) -> Iterator[Any]:
        return open_scan(self._copy)

    def started(self) -> bool:
        return True

    def count_wait(self) -> None:
        return None

    def position(self) -> dict[int, int]:
        return dict(self._copy.storage.state.positions)

    def close(self) -> None:
        self._copy.close()
