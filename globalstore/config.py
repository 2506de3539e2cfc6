"""Settings as frozen dataclasses: what the store reads, how it talks to Kafka, how RocksDB runs."""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from globalstore.codec import VALUE_FORMAT_VERSION
from globalstore.converters import ValueFormats
from globalstore.errors import ConfigurationError
from globalstore.kafka.settings import ClientSettings

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_BOOTSTRAP",
    "IndexFn",
    "OnInvalidValue",
    "OnOutOfRange",
    "OnUnreadable",
    "RocksDBOptions",
    "StoreConfig",
    "StoreSettings",
    "ValueCache",
    "check_follow_batch",
    "check_indexes",
    "check_seconds",
    "check_setting_names",
    "function_indexes",
]

# Where every command and the examples look for Kafka unless told otherwise: the local
# broker's default address, or GLOBALSTORE_BOOTSTRAP when it is set.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "GLOBALSTORE_BOOTSTRAP"


# A secondary index's function (indexes.py): fn(key, value) -> index value(s) or None.
IndexFn = Callable[[str, Any], str | Iterable[str] | None]
# Index names appear in URLs, metric labels and CLI flags: keep them plain.
_INDEX_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class RocksDBOptions:
    """RocksDB tuning. The defaults suit ~1M keys of ~200-byte values within a 400 MB budget."""

    write_buffer_size: int = 32 << 20
    max_write_buffer_number: int = 3
    block_cache_size: int = 64 << 20
    bloom_bits_per_key: int = 10
    compression: str = "lz4"  # "none" | "snappy" | "lz4" | "zstd"
    max_background_jobs: int = 2
    max_open_files: int = 512
    # Read table files through pread (False) or mmap (True). mmap makes a get that misses
    # the block cache skip a system call and a copy (up to +25 % gets/s at 1M and 4M keys),
    # but every mapped page a get or a compaction touches counts in RSS, which then grows
    # with the store: 339 / 482 / 885 MB at 1M / 4M / 10M keys against 226 / 252 / 272 MB
    # with pread (docs/performance.md, "Point reads and get_many"). pread keeps memory
    # bounded by the caches.
    mmap_reads: bool = False


@dataclass(frozen=True)
class ValueCache:
    """A cache of decoded values for get() of hot keys: a key asked again is answered without
    a RocksDB lookup or a JSON decode, until a write replaces its value (that write drops it
    before anyone can see the write) or it ages out under the ttl. At most `entries` values
    and `max_bytes` of their stored bytes (a decoded value takes a few times its stored
    size in memory); past either, the value kept longest goes first.

    get() then returns the cached object itself to every caller: treat it as read-only
    (copy it before changing it), or every later get() of the key sees the change."""

    entries: int = 10_000
    max_bytes: int = 16 << 20

    def __post_init__(self) -> None:
        if self.entries < 1 or self.max_bytes < 1:
            raise ValueError(f"ValueCache needs entries and max_bytes >= 1: {self}")


class OnUnreadable(enum.StrEnum):
    """What start() does with a store in a layout or value format this version cannot read."""

    REBUILD = "rebuild"  # rebuild it from the topic (WARNING)
    REFUSE = "refuse"  # leave it as it is and raise UnreadableStore


class OnInvalidValue(enum.StrEnum):
    """What a store does with a record whose value does not decode (not JSON, a format it does
    not read, a converter that raises) as it applies it. Not to be confused with a scan's
    `on_invalid` callback, which says what a scan does with such a value already stored."""

    STORE = "store"  # store it as it came: get() of its key raises InvalidValue
    QUARANTINE = "quarantine"  # keep the key's previous value; hold the record apart


class OnOutOfRange(enum.StrEnum):
    """What a following store does when the topic stops holding its position."""

    REBUILD = "rebuild"  # rebuild beside the live copy, which keeps serving, then switch
    STOP = "stop"  # stop following and serve the last state until a restart rebuilds


@dataclass(frozen=True)
class StoreConfig:
    """Everything a GlobalStore needs. kafka_config passes extra librdkafka settings through
    (security and the like); its secrets are masked wherever the config is shown."""

    topic: str
    bootstrap_servers: str
    path: Path
    kafka_config: Mapping[str, Any] = field(default_factory=dict)
    allow_uncompacted: bool = False
    # Read the topic's cleanup.policy and delete.retention.ms at start (needs the
    # DescribeConfigs ACL). False skips both checks: compaction is not verified and a store
    # offline longer than delete.retention.ms is resumed, not rebuilt (a WARNING says so).
    check_topic_config: bool = True
    rocksdb: RocksDBOptions = field(default_factory=RocksDBOptions)
    # Decoded values of hot keys for get() (ValueCache); None: every get reads RocksDB.
    value_cache: ValueCache | None = None
    # Records per consume() call while restoring: large batches amortise Python overhead.
    restore_batch_size: int = 10_000
    # Follow with a short poll so a produced record becomes visible within a few ms. A follow
    # batch asks for follow_batch_size records; after a full one (the follower is behind)
    # the next asks for twice as many, up to follow_batch_max records and
    # follow_batch_max_bytes of values (what a batch holds in memory is about those bytes
    # plus ~0.3 KB a record), and back down once batches come back small. Past a few
    # thousand records a batch only adds latency: with 64,000 the p99 of produce->visible
    # under busy readers was 8.4 s against 1.3 s with 8,000 (docs/performance.md).
    follow_batch_size: int = 1_000
    follow_batch_max: int = 8_000
    follow_batch_max_bytes: int = 32 << 20
    poll_timeout: float = 0.05
    # A restore planned above this many records skips the per-key "did the key exist?"
    # lookup (~10 µs for a key on disk) and counts live keys after ready instead, in the
    # background (a keys-only scan, ~1 s per million keys).
    bulk_restore_threshold: int = 50_000
    # A bulk restore runs the C loop (globalstore/follow/_native.c) when it is built: 1.7-2.2x the
    # records/s of the Python loop, which it matches record for record. False: Python only.
    native_restore: bool = True
    # Keys counted per loop iteration by that recount (~20 ms for 20k), between follow
    # batches, so follow latency stays low.
    recount_chunk: int = 20_000
    # How often the follower looks for new partitions and refreshes topic metadata.
    metadata_interval: float = 5.0
    # While caught up and idle, record "in sync at this wall time" this often (see hazards).
    heartbeat_interval: float = 10.0
    # The value format queries answer in, and {from_version: function} converters leading
    # to it from older formats (converters.py): applied at read time and, in the
    # background, to the stored values.
    value_format: int = VALUE_FORMAT_VERSION
    converters: Mapping[int, Callable[[Any], Any]] = field(default_factory=dict)
    # transform(key, value) -> value | None, run on every record before it is stored
    # (transform.py): None drops the key. transform_version is stored with the data; a
    # store written with another version (or with or without a transform) is rebuilt.
    transform: Callable[[str, Any], Any] | None = None
    transform_version: int = 1
    # Secondary indexes {name: fn(key, value) -> str | Iterable[str] | None} (indexes.py),
    # or {name: "field.path"}, a declared index read in C (fields.py), queried with
    # find(name, value). index_versions {name: int} (default 1) is stored with
    # each index: a new index or a changed version is built in the background from the
    # stored values, index_build_chunk keys at a time between follow batches.
    indexes: Mapping[str, IndexFn | str] = field(default_factory=dict)
    index_versions: Mapping[str, int] = field(default_factory=dict)
    index_build_chunk: int = 2_000
    # Time to live in seconds (ttl.py): a key whose newest record's timestamp is older is
    # left out of every query at once, and purged from disk in the background. None: keys
    # live until a tombstone deletes them.
    ttl: float | None = None
    # History in seconds (storage/history.py): every version of every key written within
    # the window is kept, for reads as of a time; older ones are purged in the background.
    # None: no history. Turning it on or off rebuilds the store; another length is adopted.
    history: float | None = None
    # A store in a layout or value format this version cannot read (written by a newer
    # version), and offsets out of range while following (heal.py). Their names as
    # strings ("refuse", "stop") are accepted too.
    unreadable_store: OnUnreadable = OnUnreadable.REBUILD
    out_of_range: OnOutOfRange = OnOutOfRange.REBUILD
    # Seconds: a store that knows it last held the topic's end longer ago than this reports
    # itself stale: status().ready false, /readyz 503. None: no bound (ready once restored).
    max_staleness: float | None = None
    # A record whose value does not decode: "store" it as it came, or "quarantine" it (the
    # key keeps its previous value; storage/quarantine.py). Changing it rebuilds the store.
    invalid_values: OnInvalidValue = OnInvalidValue.STORE

    def __post_init__(self) -> None:
        # Read-only, and its repr masks the secrets: a config can be printed or logged.
        object.__setattr__(self, "kafka_config", ClientSettings(self.kafka_config))
        object.__setattr__(self, "path", Path(self.path))
        self.value_formats()  # ConfigurationError for a converter chain with a gap
        if self.transform is not None and not callable(self.transform):
            raise ConfigurationError(f"transform is not callable: {self.transform!r}")
        check_indexes(self.indexes, self.index_versions)
        check_seconds("ttl", self.ttl)
        check_seconds("history", self.history)
        check_seconds("max_staleness", self.max_staleness)
        check_follow_batch(self.follow_batch_size, self.follow_batch_max)
        object.__setattr__(self, "indexes", dict(self.indexes))
        object.__setattr__(self, "index_versions", dict(self.index_versions))
        version = self.transform_version
        if type(version) is not int or version < 1:
            raise ConfigurationError(f"transform_version must be an int >= 1, not {version!r}")
        for name, mode in (
            ("unreadable_store", OnUnreadable),
            ("out_of_range", OnOutOfRange),
            ("invalid_values", OnInvalidValue),
        ):
            value = getattr(self, name)
            if value not in tuple(mode):
                choices = " or ".join(repr(m.value) for m in mode)
                raise ConfigurationError(f"{name} must be {choices}, not {value!r}")
            object.__setattr__(self, name, mode(value))
        for name in self.kafka_config:
            why = _PROTECTED_SETTINGS.get(name)
            if why is not None:
                raise ConfigurationError(
                    f"kafka_config may not set {name!r}: the store relies on its own value "
                    f"({why}). Remove it; connection and security settings are fine."
                )

    def named_settings(self) -> StoreSettings:
        """The settings past the first four that differ from their defaults, by name (what
        GlobalStore(topic, bootstrap_servers, path, kafka_config, **settings) was given)."""
        named = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)[4:]
            if getattr(self, f.name) != getattr(_DEFAULTS, f.name)
        }
        return cast(StoreSettings, named)

    def index_definitions(self) -> dict[str, int]:
        """{index name: version} of every index."""
        return {name: self.index_versions.get(name, 1) for name in self.indexes}

    def value_formats(self) -> ValueFormats:
        """The value format queries answer in, with the converters from older formats."""
        return ValueFormats(self.value_format, dict(self.converters))

    def consumer_config(self) -> dict[str, Any]:
        """librdkafka settings for the single assign-only consumer; kafka_config wins."""
        base: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            # Never used for commits: assign() only, offsets live in the store.
            "group.id": f"globalstore-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            # Never jump silently: a position the topic no longer holds (records deleted,
            # topic recreated) is an error the store thread reports (OffsetsOutOfRange).
            "auto.offset.reset": "error",
            "statistics.interval.ms": 1000,
            "fetch.wait.max.ms": 10,
            # Prefetch buffers are per partition and librdkafka's defaults (100k messages /
            # 64 MB each) cost hundreds of MB on a 6-partition topic for no extra throughput.
            "queued.min.messages": 10_000,
            "queued.max.messages.kbytes": 4096,
            # Fetch sizes count compressed bytes, and a fetch is decompressed whole: with
            # 1 MB per partition a restore of a well-compressed topic peaked at 418 MB (233 MB
            # on the benchmark's topic); 256 KB gave 240 MB (177 MB) at the same rate.
            "fetch.max.bytes": 2 << 20,
            "max.partition.fetch.bytes": 256 << 10,
            # When a partition's queue is full, librdkafka waits this long before fetching
            # it again (default 1 s): with the small queues above the restore kept idling on
            # it. 10 ms doubled a 1M-record cold restore (134k -> 268k rec/s, same run,
            # alternating, benchmarks/results/history.md, "Store") at no memory cost: the
            # queues stay capped.
            "fetch.queue.backoff.ms": 10,
        }
        base.update(self.kafka_config)
        return base

    def admin_config(self) -> dict[str, Any]:
        """AdminClient settings: the consumer's, minus every consumer-only property (an
        AdminClient warns about each one it is given). What is left is the bootstrap,
        client.id and the connection settings (security.*, sasl.*, ssl.*, socket.*, ...),
        which the AdminClient needs exactly as the consumer has them."""
        return {k: v for k, v in self.consumer_config().items() if k not in _CONSUMER_ONLY_SETTINGS}


class StoreSettings(TypedDict, total=False):
    """StoreConfig's settings past the first four, by name, as the store faces take them:
    GlobalStore(..., ttl=3600). A type checker then tells a misspelled one (tll=3600) or a
    wrong type; at run time StoreConfig raises TypeError for an unknown name."""

    allow_uncompacted: bool
    check_topic_config: bool
    rocksdb: RocksDBOptions
    value_cache: ValueCache | None
    restore_batch_size: int
    follow_batch_size: int
    follow_batch_max: int
    follow_batch_max_bytes: int
    poll_timeout: float
    bulk_restore_threshold: int
    native_restore: bool
    recount_chunk: int
    metadata_interval: float
    heartbeat_interval: float
    value_format: int
    converters: Mapping[int, Callable[[Any], Any]]
    transform: Callable[[str, Any], Any] | None
    transform_version: int
    indexes: Mapping[str, IndexFn | str]
    index_versions: Mapping[str, int]
    index_build_chunk: int
    ttl: float | None
    history: float | None
    unreadable_store: OnUnreadable | str
    out_of_range: OnOutOfRange | str
    max_staleness: float | None
    invalid_values: OnInvalidValue | str


# Consumer settings the store's correctness rests on, and why; kafka_config may not change them.
_PROTECTED_SETTINGS = {
    "enable.partition.eof": "a partition's end is how the store knows it has reached it",
    "auto.offset.reset": "'error' makes a position the topic no longer holds a rebuild, "
    "never a silent jump",
    "isolation.level": "read_committed keeps aborted records out of the store",
    "enable.auto.commit": "offsets live inside the store, never in Kafka",
    "enable.auto.offset.store": "offsets live inside the store, never in Kafka",
    "group.id": "the store assigns every partition itself and joins no group",
}

# librdkafka properties that only a consumer understands (scope "C" in librdkafka's
# CONFIGURATION.md), plus statistics, which the store reads from its consumer only.
_CONSUMER_ONLY_SETTINGS = frozenset(
    {
        "auto.commit.interval.ms",
        "auto.offset.reset",
        "check.crcs",
        "consume.callback.max.messages",
        "coordinator.query.interval.ms",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "fetch.error.backoff.ms",
        "fetch.max.bytes",
        "fetch.message.max.bytes",
        "fetch.min.bytes",
        "fetch.queue.backoff.ms",
        "fetch.wait.max.ms",
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.protocol.type",
        "group.remote.assignor",
        "heartbeat.interval.ms",
        "isolation.level",
        "max.partition.fetch.bytes",
        "max.poll.interval.ms",
        "offset.store.method",
        "partition.assignment.strategy",
        "queued.max.messages.kbytes",
        "queued.min.messages",
        "session.timeout.ms",
        "statistics.interval.ms",
    }
)


def check_seconds(name: str, seconds: Any) -> None:
    """ConfigurationError unless `seconds` is None or a positive, finite number."""
    if seconds is None:
        return
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds < math.inf
    ):
        raise ConfigurationError(
            f"{name} must be a positive number of seconds (or None for none), not {seconds!r}"
        )


def check_follow_batch(least: Any, most: Any) -> None:
    """ConfigurationError unless 1 <= follow_batch_size <= follow_batch_max <= 1M (the most
    one consume() call returns)."""
    if type(least) is not int or type(most) is not int or not 1 <= least <= most <= 1_000_000:
        raise ConfigurationError(
            "follow_batch_size and follow_batch_max must be ints with "
            f"1 <= follow_batch_size <= follow_batch_max <= 1000000, not {least!r} and {most!r}"
        )


def _check_path(name: str, path: str) -> None:
    if not path or "" in path.split(".") or "\x00" in path:
        raise ConfigurationError(
            f"index {name!r}: a declared index names a JSON field, a path of "
            f"non-empty names joined by '.' (such as 'customer.id'), not {path!r}"
        )


def function_indexes(indexes: Mapping[str, IndexFn | str]) -> dict[str, IndexFn]:
    """{index name: function} of `indexes` given as functions (not declared by a path)."""
    return {name: fn for name, fn in indexes.items() if not isinstance(fn, str)}


def check_indexes(indexes: Mapping[str, Any], versions: Mapping[str, Any]) -> None:
    """ConfigurationError for an index setting the store cannot use."""
    if not isinstance(indexes, Mapping):
        raise ConfigurationError(f"indexes must be a mapping of name to function: {indexes!r}")
    for name, fn in indexes.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"index name must be a non-empty str, not {name!r}")
        if not _INDEX_NAME.fullmatch(name):
            raise ConfigurationError(
                f"index name {name!r} may hold only letters, digits, '_', '.' and '-' "
                "(and may not start with '.' or '-')"
            )
        if isinstance(fn, str):
            _check_path(name, fn)
        elif not callable(fn):
            raise ConfigurationError(f"index {name!r}: function is not callable: {fn!r}")
    for name, version in versions.items():
        if name not in indexes:
            known = ", ".join(repr(n) for n in indexes) or "none"
            raise ConfigurationError(
                f"index_versions names {name!r}, which is not an index (indexes: {known})"
            )
        if type(version) is not int or version < 1:
            raise ConfigurationError(
                f"index_versions[{name!r}] must be an int >= 1, not {version!r}"
            )


_DEFAULTS = StoreConfig("", "", Path())  # what named_settings() leaves out
_SETTINGS = [f.name for f in dataclasses.fields(StoreConfig)[4:]]


def check_setting_names(face: str, settings: Iterable[str]) -> None:
    """TypeError naming `face` and the nearest setting, as a type checker would, for a name
    that is no setting (GlobalStore(..., tll=60)): the dataclass's own error names
    StoreConfig.__init__ and suggests nothing."""
    for name in settings:
        if name not in _SETTINGS:
            near = difflib.get_close_matches(name, _SETTINGS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TypeError(f"{face}() got an unexpected keyword argument {name!r}{hint}")
