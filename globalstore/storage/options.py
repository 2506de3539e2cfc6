"""RocksDBOptions (config.py, plain settings) as rocksdict Options."""

from __future__ import annotations

import rocksdict

from globalstore.config import RocksDBOptions

__all__ = ["rocksdb_options"]


def rocksdb_options(settings: RocksDBOptions) -> rocksdict.Options:
    """rocksdict Options in raw mode: bytes in, bytes out, nothing pickled."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_write_buffer_size(settings.write_buffer_size)
    opts.set_max_write_buffer_number(settings.max_write_buffer_number)
    opts.set_max_background_jobs(settings.max_background_jobs)
    opts.set_max_open_files(settings.max_open_files)
    opts.set_compression_type(_compression(settings.compression))
    opts.set_allow_mmap_reads(settings.mmap_reads)
    # A bulk restore writes without the write-ahead log (Storage.apply): flushing both
    # column families together keeps its offsets from outliving its data in a crash.
    opts.set_atomic_flush(True)
    table = rocksdict.BlockBasedOptions()
    if settings.bloom_bits_per_key > 0:
        # Bloom filters make lookups of absent keys (new keys, tombstoned keys) nearly free.
        table.set_bloom_filter(settings.bloom_bits_per_key, False)
    table.set_block_cache(rocksdict.Cache(settings.block_cache_size))
    _index_and_filters_in_cache(table)
    opts.set_block_based_table_factory(table)
    return opts


def _index_and_filters_in_cache(table: rocksdict.BlockBasedOptions) -> None:
    """Keep each table file's index and bloom filter in the block cache, in small partitions.

    Left outside the cache, every open table file holds its whole index and filter in
    memory: 2.6 MB per million keys, so RSS grew with the store (354 MB at 50M keys). Whole
    index and filter blocks in the cache made a get 50-200x slower, as each miss loaded a
    block of megabytes. Partitioned, a get loads only a 4 KB partition; the small top level
    of each file, and the files just flushed (L0), stay pinned (docs/performance.md, "Scale:
    store size")."""
    table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)


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
