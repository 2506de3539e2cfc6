"""The C consume loop (globalstore/follow/_native.c) behind a small Python face.

A cold restore spends most of its CPU turning records into confluent-kafka Message objects
and reading them back (docs/performance.md, "Restore"). The C loop consumes with a consumer of
its own, in the same librdkafka library confluent-kafka loaded, and writes each record to
the WriteBatch directly. It restores every store it can, and goes on following plain stores
(native_source.py says which); for the others the store thread's own consumer follows.
"""

from __future__ import annotations

import ctypes.util
import functools
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError  # also maps confluent-kafka's librdkafka

from globalstore.codec import LAYOUT_VERSION, VALUE_FORMAT_VERSION, format_headers, value_format
from globalstore.storage.records import Checked, Delete, DeleteAt, Put, Shaped

try:
    from globalstore.follow import _native

    BUILT = True
except ImportError:  # not compiled (no C compiler where the package was installed)
    BUILT = False

__all__ = ["NativeEvent", "NativeRestorer", "load", "native_settings"]

# The store thread's health callbacks and log routing are Python callables; the C consumer
# has its errors reported as events instead (NativeEvent), and keeps its statistics for
# stats().
_PYTHON_ONLY_SETTINGS = ("stats_cb", "error_cb", "logger")


class NativeEvent:
    """A consumer event from the C loop, shaped like the confluent-kafka Message that carries
    an error, so the store thread handles both alike."""

    __slots__ = ("_error", "_offset", "_partition")

    def __init__(self, code: int, partition: int, offset: int, reason: str, fatal: bool) -> None:
        self._error = KafkaError(code, reason, fatal=fatal)
        self._partition = partition
        self._offset = offset

    def error(self) -> KafkaError:
        """The event's KafkaError (always set: an event is an error or a partition end)."""
        return self._error

    def partition(self) -> int:
        """The partition the event is about."""
        return self._partition

    def offset(self) -> int:
        """The offset the event is about."""
        return self._offset


class NativeRestorer:
    """A consumer assigned at `offsets` whose fill() writes one consumed batch through a
    WriteBatch's put and delete exactly as storage/records.py's fill() writes the records the
    thread's consumer source makes of confluent-kafka's messages. A batch holds at most
    `limit` records (at most `batch_size`); `first` makes fill() wait for the first record
    only, not for a full batch (following). `events` holds the consumer events (errors,
    partition ends) of the last batch."""

    def __init__(
        self, conf: Mapping[str, str], topic: str, offsets: Mapping[int, int], batch_size: int
    ) -> None:
        if not BUILT:
            raise RuntimeError("globalstore.follow._native is not built")
        [(name, declared)] = format_headers()
        self._restorer = _native.Restorer(
            conf=dict(conf),
            topic=topic,
            offsets=dict(offsets),
            capacity=batch_size,
            layout=LAYOUT_VERSION,
            declared_name=name,
            declared_value=declared,
            current_format=VALUE_FORMAT_VERSION,
            undeclared_format=value_format(None),
            value_format=value_format,
        )
        self.limit, self.first = batch_size, False
        self.events: list[NativeEvent] = []

    def fill(
        self,
        put: Put,
        delete: Delete | DeleteAt,
        nexts: dict[int, int],
        skipped: list[tuple[int, int, bytes]],
        timeout: float,
        checked: Checked | None = None,
        shape: Shaped | None = None,
        record_deletes: bool = False,
    ) -> int:
        """Consume one batch (waiting up to `timeout` s for the first record) and write it;
        returns the number of records (events not counted). `checked`: a quarantining
        store's values the loop finds certainly JSON skip its Python check (_json_check.h).
        `shape`: a declared transform (shaping/_shape.h) the loop applies to the values of
        its format it is sure of; the others go to `put`, the transform's own.
        `record_deletes`: `delete` is given each delete's partition, offset and timestamp
        (a store with history writes the tombstone's version)."""
        raw: list[tuple[int, int, int, str, bool]] = []
        wait_ms = int(timeout * 1000)
        records = self._restorer.fill(
            put, delete, nexts, raw, skipped, wait_ms, self.limit, self.first, checked, shape,
            record_deletes,
        )  # fmt: skip
        self.events = [NativeEvent(*event) for event in raw]
        return records

    def held(self) -> int:
        """Bytes of the values of the last batch consumed."""
        return self._restorer.held()

    def oldest(self) -> int | None:
        """Following: the oldest record timestamp (ms) of the last batch; None if it held
        none, or while restoring."""
        return self._restorer.oldest()

    def stats(self) -> str | None:
        """librdkafka's statistics JSON reported since the last call, or None."""
        return self._restorer.stats()

    def close(self) -> None:
        """Close the C loop and its consumer."""
        self._restorer.close()


def native_settings(conf: Mapping[str, Any]) -> dict[str, str] | None:
    """The consumer settings as librdkafka strings, or None when one of them is a Python
    callable the C consumer cannot call (an oauth_cb, say): the Python loop restores then."""
    out: dict[str, str] = {}
    for name, value in conf.items():
        if name in _PYTHON_ONLY_SETTINGS:
            continue
        if callable(value):
            return None
        out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


@functools.cache
def load() -> str | None:
    """Resolve librdkafka in the C module; None when ready, else why the Python loop runs."""
    if not BUILT:
        return "the C restore loop is not built"
    path = _librdkafka_path()
    if path is None:
        return "librdkafka's shared library was not found"
    try:
        _native.load(path)
    except OSError as exc:
        return str(exc)
    return None


def _librdkafka_path() -> str | None:
    """The librdkafka confluent-kafka runs on: the one its extension mapped into this
    process (a wheel bundles its own copy), else the system's."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if "librdkafka" in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        pass  # not Linux
    return ctypes.util.find_library("rdkafka")
