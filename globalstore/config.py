"""Settings as frozen dataclasses: what the store reads, how it talks to Kafka, how RocksDB runs."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rocksdict


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

    def to_options(self) -> rocksdict.Options:
        """Build rocksdict Options in raw mode: bytes in, bytes out, nothing pickled."""
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        opts.set_write_buffer_size(self.write_buffer_size)
        opts.set_max_write_buffer_number(self.max_write_buffer_number)
        opts.set_max_background_jobs(self.max_background_jobs)
        opts.set_max_open_files(self.max_open_files)
        opts.set_compression_type(_compression(self.compression))
        table = rocksdict.BlockBasedOptions()
        if self.bloom_bits_per_key > 0:
            # Bloom filters make lookups of absent keys (new keys, tombstoned keys) nearly free.
            table.set_bloom_filter(self.bloom_bits_per_key, False)
        table.set_block_cache(rocksdict.Cache(self.block_cache_size))
        opts.set_block_based_table_factory(table)
        return opts


def _compression(name: str) -> rocksdict.DBCompressionType:
    kinds = {
        "none": rocksdict.DBCompressionType.none,
        "snappy": rocksdict.DBCompressionType.snappy,
        "lz4": rocksdict.DBCompressionType.lz4,
        "zstd": rocksdict.DBCompressionType.zstd,
    }
    if name not in kinds:
        raise ValueError(f"unknown compression {name!r}; choose one of {sorted(kinds)}")
    return kinds[name]()


@dataclass(frozen=True)
class StoreConfig:
    """Everything a GlobalStore needs. kafka_config passes extra librdkafka settings through."""

    topic: str
    bootstrap_servers: str
    path: Path
    kafka_config: Mapping[str, Any] = field(default_factory=dict)
    allow_uncompacted: bool = False
    rocksdb: RocksDBOptions = field(default_factory=RocksDBOptions)
    # Records per consume() call while restoring: large batches amortise Python overhead.
    restore_batch_size: int = 10_000
    # Follow with a short poll so a produced record becomes visible within a few ms.
    follow_batch_size: int = 1_000
    poll_timeout: float = 0.05
    # A restore planned above this many records skips the per-record "did the key exist?"
    # lookup and recounts live keys once at the end (a keys-only scan) instead.
    bulk_restore_threshold: int = 50_000
    # How often the follower looks for new partitions and refreshes topic metadata.
    metadata_interval: float = 5.0
    # While caught up and idle, record "in sync at this wall time" this often (see hazards).
    heartbeat_interval: float = 10.0

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
            "auto.offset.reset": "earliest",
            "statistics.interval.ms": 1000,
            "fetch.wait.max.ms": 10,
            # Prefetch buffers are per partition and librdkafka's defaults (100k messages /
            # 64 MB each) cost hundreds of MB on a 6-partition topic for no extra throughput.
            "queued.min.messages": 10_000,
            "queued.max.messages.kbytes": 4096,
            "fetch.max.bytes": 8 << 20,
            "max.partition.fetch.bytes": 1 << 20,
        }
        base.update(self.kafka_config)
        return base

    def admin_config(self) -> dict[str, Any]:
        """AdminClient settings: the bootstrap plus any security settings from kafka_config."""
        consumer_only = {
            "group.id",
            "enable.auto.commit",
            "enable.auto.offset.store",
            "isolation.level",
            "enable.partition.eof",
            "auto.offset.reset",
            "fetch.wait.max.ms",
            "queued.min.messages",
            "queued.max.messages.kbytes",
            "fetch.max.bytes",
            "max.partition.fetch.bytes",
            "statistics.interval.ms",
        }
        conf = {k: v for k, v in self.consumer_config().items() if k not in consumer_only}
        return conf
