"""RocksDBOptions (config.py, plain settings) as rocksdict Options."""

from __future__ import annotations

import rocksdict

from globalstore.config import RocksDBOptions


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
