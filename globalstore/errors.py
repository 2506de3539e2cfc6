"""Every exception the store raises, in one tree.

    GlobalStoreError
    ├── RetriableError            the same call may succeed later; nothing is wrong with the data
    │   ├── StoreNotReady         a query before start() reached the end offsets (contract 4)
    │   ├── IndexNotReady         find() on a secondary index still being built (indexes.py)
    │   └── StartTimeout          start() did not reach ready within its timeout
    │       └── BrokerUnavailable no broker answered at the bootstrap address
    └── FatalError                retrying the same call will not help; a person must act
        ├── StoreLocked           another process holds the store directory
        ├── StoreAlreadyStarted   start() called twice on one store (also a RuntimeError)
        ├── StoreClosed           the store no longer answers: close() was called
        │   └── StoreFailed       its thread stopped on an error (see __cause__), before
        │                         ready or while following
        ├── TopicNotFound         the topic does not exist
        ├── TopicNotCompacted     the topic is not compacted and allow_uncompacted is False
        ├── UnknownIndex          find() names an index the store does not have
        ├── HistoryUnavailable    a read as of a time the store cannot answer (before its
        │                         oldest time, or a store without history)
        ├── ConfigurationError    a setting is refused: by a Kafka client, by RocksDB (its
        │                         options, or a feature its build lacks), or because the
        │                         store relies on its own value (names it)
        ├── AuthenticationError   the broker refused the client's credentials or certificate
        │                         (wrong password, unknown user, untrusted certificate)
        ├── AuthorizationError    the broker denied the store's principal an operation it
        │                         needs on the topic; names topic, operation and the way on
        ├── OffsetsOutOfRange     while following, the topic stopped holding the store's
        │                         position (records deleted, topic recreated): the store
        │                         heals by rebuilding beside (out_of_range="rebuild", the default)
        ├── InvalidValue          a stored value is not valid JSON (or has an unknown format);
        │   │                     names topic, partition and offset of the record
        │   └── ConversionFailed  a value format converter raised on the record (names the
        │                         format it was in; the stored record is kept as it was)
        ├── UnreadableStore       the store was written in a layout or value format this
        │                         version cannot read, and unreadable_store="refuse"
        └── StorageError          RocksDB failed (disk full, I/O error, ...); for a full or
            │                     failing disk it names the disk and its free space
            └── DamagedLayoutError the store's meta entries cannot be parsed: at start the
                                  store is rebuilt (never raised then); a read-only view
                                  raises it

Rebuilds (offsets out of range, store offline longer than delete.retention.ms, damaged
layout, and by default a layout or value format this version cannot read) are not errors:
the store repairs itself and logs a WARNING.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "BrokerUnavailable",
    "ConfigurationError",
    "ConversionFailed",
    "DamagedLayoutError",
    "FatalError",
    "GlobalStoreError",
    "HistoryUnavailable",
    "IndexNotReady",
    "InvalidValue",
    "OffsetsOutOfRange",
    "RetriableError",
    "StartTimeout",
    "StorageError",
    "StoreAlreadyStarted",
    "StoreClosed",
    "StoreFailed",
    "StoreLocked",
    "StoreNotReady",
    "TopicNotCompacted",
    "TopicNotFound",
    "UnknownIndex",
    "UnreadableStore",
]


class GlobalStoreError(Exception):
    """Base of every exception raised by globalstore."""


class RetriableError(GlobalStoreError):
    """The same call may succeed later without any change."""


class FatalError(GlobalStoreError):
    """Retrying will not help: configuration, environment or data must change."""


class StoreNotReady(RetriableError):  # noqa: N818 - public names fixed by the API
    """The store has not yet restored up to the end offsets captured at start."""


class IndexNotReady(RetriableError):  # noqa: N818 - public names fixed by the API
    """find() or find_count() on a secondary index that is still being built from the stored
    values (status() shows its progress); it answers once the build is done."""


class StartTimeout(RetriableError):  # noqa: N818 - public names fixed by the API
    """start() did not finish restoring within its timeout."""


class BrokerUnavailable(StartTimeout):
    """No broker answered at the bootstrap address before the timeout."""


class StoreLocked(FatalError):  # noqa: N818 - public names fixed by the API
    """Another process (or another GlobalStore in this process) holds the store directory."""


class StoreAlreadyStarted(FatalError, RuntimeError):  # noqa: N818 - reads as a state
    """start() was called on a store that was already started. A RuntimeError too, which
    is what earlier versions raised."""


class StoreClosed(FatalError):  # noqa: N818 - public names fixed by the API
    """The store no longer answers because close() was called (on it, or by a
    SwitchingStore retiring it)."""


class StoreFailed(StoreClosed):
    """The store's background thread stopped on an error (its __cause__): before the store
    was ready, or while following, for calls that wait on new records. Queries of a store
    that was ready keep answering from its last state."""


class TopicNotFound(FatalError):  # noqa: N818 - public names fixed by the API
    """The configured topic does not exist."""


class TopicNotCompacted(FatalError):  # noqa: N818 - public names fixed by the API
    """The topic's cleanup.policy lacks 'compact'; pass allow_uncompacted=True to accept it."""


class UnknownIndex(FatalError, KeyError):  # noqa: N818 - reads as the condition
    """find() or find_count() names an index the store was not given (a KeyError too)."""

    def __str__(self) -> str:  # KeyError's own quotes its message
        return str(self.args[0]) if self.args else ""


class HistoryUnavailable(FatalError):  # noqa: N818 - reads as the condition
    """A read as of a time the store cannot answer: before the oldest time it holds every
    version for (`oldest`, epoch seconds), or a store that keeps no history, or a read of
    a function index in a process that does not hold its function (`oldest` is None).
    Never answered with a guess: ask for a later time."""

    def __init__(self, message: str, oldest: float | None = None) -> None:
        super().__init__(message)
        self.oldest = oldest


class ConfigurationError(FatalError):
    """A setting is refused: a Kafka client's (unknown name or bad value), RocksDB's ("Invalid
    argument": its options, or a column family or compression this build does not know; the
    store's files are left as they are), or one the store relies on that kafka_config tried
    to change."""


class AuthenticationError(FatalError):
    """The broker refused the client's SASL credentials or its TLS certificate, or the
    client could not verify the broker's: a wrong password, an unknown user, a certificate
    signed by another CA. Not an outage: retrying with the same settings will not help. The
    message says which, in one line, and never quotes a secret."""


class AuthorizationError(FatalError):
    """The broker denied the store's principal an operation on the topic (an ACL is missing).
    Not an outage: retrying will not help until someone grants it; the message names the
    topic, the operation and what to do."""

    def __init__(
        self, topic: str, operation: str, username: str | None, denial: str, remedy: str
    ) -> None:
        who = f"User:{username}" if username else "the store's principal"
        super().__init__(
            f"the broker denied {who} {operation} on topic {topic!r} ({denial}). {remedy}"
        )
        self.topic = topic
        self.operation = operation


class OffsetsOutOfRange(FatalError):  # noqa: N818 - public names fixed by the API
    """The topic no longer holds the records at the store's position (records deleted or the
    topic recreated while the store ran). The store stops following, keeps serving its last
    state and says so in status(); the next start() rebuilds it from the beginning."""


class StorageError(FatalError):
    """RocksDB (or a file operation in the store directory) failed. When the disk is full or
    failing the message names the disk, the store's path and the free space; the store is
    never wiped for it and resumes where it stopped once space returns."""


class DamagedLayoutError(StorageError):
    """The store's meta column family holds an entry that does not parse. A starting store
    rebuilds itself from the topic instead of raising it."""


class InvalidValue(FatalError):  # noqa: N818 - public names fixed by the API
    """A stored value cannot be decoded; says which record it came from. get() raises it;
    a scan leaves the value out and reports it (its `on_invalid`)."""

    # Set when a find() or find_matches() scan reached the value through an index: the index
    # value that led there (a page's cursor continues past it).
    index_value: str | None = None

    def __init__(
        self, topic: str, key: bytes | str, partition: int, offset: int, reason: str
    ) -> None:
        """`key` as stored (bytes) or as the API names keys (str); `key` is a str."""
        name = key if isinstance(key, str) else key.decode("utf-8", "replace")
        super().__init__(
            f"invalid value for key {name!r} in topic {topic!r} "
            f"partition {partition} offset {offset}: {reason}"
        )
        self.topic = topic
        self.key = name  # a str, as every key of the API
        self.partition = partition
        self.offset = offset
        self.reason = reason


class ConversionFailed(InvalidValue):
    """A value format converter raised on a stored value, which stays as it was."""

    def __init__(
        self,
        topic: str,
        key: bytes | str,
        partition: int,
        offset: int,
        version: int,
        cause: Exception,
    ) -> None:
        super().__init__(
            topic,
            key,
            partition,
            offset,
            f"converter from value format {version} failed: {type(cause).__name__}: {cause}",
        )
        self.version = version


class UnreadableStore(FatalError):  # noqa: N818 - public names fixed by the API
    """The store holds a layout or value format this version cannot read, and the store was
    configured to refuse it (unreadable_store="refuse") instead of rebuilding."""
