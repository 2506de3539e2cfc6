"""The store's RocksDB database, and the only package of globalstore that imports rocksdict.

database.py   Storage: open (locked), apply a batch with its offsets, read, scan, wipe,
              checkpoint; its StorageState, replaced whole after every change
records.py    consumed records into put/delete operations (the Python hot loop), Applied
options.py    RocksDBOptions as rocksdict Options
lock.py       the directory lock (one process per store directory)
failures.py   what an error RocksDB raised means: locked, damaged or the environment's
"""

from globalstore.storage.database import Storage, StorageState
from globalstore.storage.lock import LOCK_FILE
from globalstore.storage.options import rocksdb_options
from globalstore.storage.records import Applied

__all__ = ["LOCK_FILE", "Applied", "Storage", "StorageState", "rocksdb_options"]
