"""The user's transform on ingest: fn(key, value) -> value | None, run on every record before
it is stored, while restoring and while following.

The transform sees each value decoded and brought to the current value format by the
converters (converters.py), and what it returns is stored in that format: a value in place
of the record's, or None to delete the key. It runs where the records of a batch are read
(`Transformed` wraps them), so storage writes its one WriteBatch per batch as it always does,
values and offsets together.

  * A tombstone deletes its key whatever the transform says (it is not called).
  * A value the store cannot read (not JSON, a format it does not read, a converter that
    raises) is stored as it came, as without a transform: reading it raises InvalidValue or
    ConversionFailed, naming the record.
  * A transform that raises (or returns what JSON cannot hold) is counted and logged with
    the key, partition and offset; the key stays as it was stored before the record, and
    the record's offset is applied like any other's.

What a store was written with is kept in its meta (meta.K_TRANSFORM, K_TRANSFORM_FORMAT):
opening it with another transform_version, a transform where there was none (or none where
there was one), or a transform given another value format, rebuilds it (rebuild_reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from globalstore.codec import format_headers, value_format
from globalstore.config import StoreConfig
from globalstore.converters import ValueFormats
from globalstore.meta import K_TRANSFORM, K_TRANSFORM_FORMAT, Meta
from globalstore.storage import Record, Records
from globalstore.storage.records import Headers

log = logging.getLogger(__name__)

Transform = Callable[[str, Any], Any]

_FAILURES_LOGGED_PER_BATCH = 10  # a transform failing on every record must not flood the log
_UNREADABLE = object()  # what _decode returns for a value the store stores as it came


class Transformer:
    """A store's transform, with what it needs to feed it: the value formats."""

    def __init__(self, fn: Transform, formats: ValueFormats, topic: str) -> None:
        self.fn, self.formats, self.topic = fn, formats, topic
        # What a transformed record declares: the current format.
        self.headers: Headers = [*format_headers(formats.current)]

    def records(self, records: Records) -> Transformed:
        return Transformed(self, records)

    def apply(self, record: Record) -> Record:
        """The record to store in place of `record`: its value transformed, or None (delete)
        if the transform says so. Raises what the transform raises."""
        key, value, headers, p, o, ts = record
        if key is None or value is None:
            return record  # a tombstone deletes whatever the transform says
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            return record  # storage skips and reports it
        decoded = self._decode(value, headers)
        if decoded is _UNREADABLE:
            return record
        out = self.fn(name, decoded)
        return key, None if out is None else orjson.dumps(out), self.headers, p, o, ts

    def _decode(self, value: bytes, headers: Any) -> Any:
        formats = self.formats
        version = value_format(headers)
        if not formats.reads(version):
            return _UNREADABLE
        try:
            return formats.upgrade(orjson.loads(value), version)
        except Exception:  # not JSON, or a converter raised: reading it will say which
            return _UNREADABLE


class Transformed:
    """A batch's records, each transformed as storage reads it (no list is made of them),
    and how many the transform raised on."""

    __slots__ = ("_records", "_transformer", "failures")

    def __init__(self, transformer: Transformer, records: Records) -> None:
        self._transformer, self._records = transformer, records
        self.failures = 0

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        apply = self._transformer.apply
        for record in self._records:
            try:
                out = apply(record)
            except Exception as exc:
                out = self._failed(record, exc)
            yield out
        more = self.failures - _FAILURES_LOGGED_PER_BATCH
        if more > 0:
            log.warning("transform raised on %d more records of %s", more, self._transformer.topic)

    def _failed(self, record: Record, exc: Exception) -> Record:
        """Count and log a record the transform raised on; what storage applies instead: a
        record without a key, so its offset only (the key stays as it was)."""
        key, _, _, p, o, ts = record
        self.failures += 1
        if self.failures <= _FAILURES_LOGGED_PER_BATCH:
            log.warning(
                "transform raised on key %r of %s partition %d offset %d (%s: %s); the key "
                "is kept as it was",
                (key or b"").decode("utf-8"),
                self._transformer.topic,
                p,
                o,
                type(exc).__name__,
                exc,
            )
        return None, None, None, p, o, ts


def transformer(config: StoreConfig) -> Transformer | None:
    """The transformer of a store's config, or None when it has no transform."""
    if config.transform is None:
        return None
    return Transformer(config.transform, config.value_formats(), config.topic)


def meta_entries(config: StoreConfig) -> dict[bytes, bytes]:
    """The meta entries a new store of this config is initialised with (none without a
    transform: a store written before transforms existed reads the same)."""
    if config.transform is None:
        return {}
    return {
        K_TRANSFORM: b"%d" % config.transform_version,
        K_TRANSFORM_FORMAT: b"%d" % config.value_format,
    }


def rebuild_reason(meta: Meta, config: StoreConfig) -> str | None:
    """Why values stored under `meta` are not what this config's transform would store, or
    None if they are."""
    stored, wanted = meta.transform_version, config.transform_version
    if config.transform is None:
        if stored is None:
            return None
        return f"store was written with transform version {stored}; no transform is given now"
    if stored is None:
        return f"store was written without a transform; transform version {wanted} is given now"
    if stored != wanted:
        return f"store was written with transform version {stored}, not {wanted}"
    if meta.transform_format != config.value_format:
        return (
            f"store's transform was given values of format {meta.transform_format}, not "
            f"{config.value_format}"
        )
    return None
