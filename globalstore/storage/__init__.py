"""The store's RocksDB database, every byte layout it holds, and the one write path: the only
package of globalstore that imports rocksdict.
It never reads a Kafka message either: apply() takes plain records (Record tuples) and the
partition ends reached, which the thread's consumer source (follow/consumer_source.py)
makes of what its consumer returns; the C loop (follow/native.py) fills its batches itself.

database.py   Storage: open (locked, read-only or as a secondary that catches up), apply a
              batch of records with its offsets, commit every write, read, wipe, checkpoint
batch.py      Batch: one write, its WriteBatch and the state the store holds once written
cache.py      HotValues, the decoded values get() keeps of hot keys: every write drops
              what it replaces before its state is published
state.py      StorageState, what it holds as of one batch, replaced whole after every write
meta.py       the meta column family's keys and entries, and their parsing
keys.py       the index column family's keys: secondary index entries and time entries
scan.py       scans over one point-in-time view, and the background key count
reads.py      Reads, what queries read of a database: the live Storage, or a Pinned one
pinned.py     Pinned, the database as of one instant (a view's): iterators made then
records.py    Record; records into put/delete operations (the Python hot loop), Applied
quarantine.py the records a quarantining store did not apply: the check each put goes
              through (either loop), their entries in the meta column family
index_defs.py the secondary indexes: their definitions and how a config changes them, the
              entries a batch's keys get, the chunks of their build
timeindex.py  the time index of a store with a ttl: its entries written with each batch,
              the purge of expired keys, its build, a count without the expired keys
rules.py      WriteRules: what a store's writes do beyond storing records (indexes, the
              check of each value, ttl, history), given at construction, defined by define()
history.py    History: a store's window of versions, its reads as of a time, its purge
versions.py   the versions' layout (3: an entry for each value replaced and each
              tombstone) and the walk to a key's version as of a time
version_recorder.py  the versions a batch's records make, beside their values
written.py    the keys a bulk restore into an empty store has written (a KeyFilter): which
              keys may have an old value, index entries or a version to move
host.py       IndexHost: what those indexes use of the Storage holding them
index_family.py  the index column family both keep their entries in
opening.py    how the database is opened (access, column families), and a damaged one wiped
options.py    RocksDBOptions as rocksdict Options
lock.py       the directory lock (one process per store directory)
failures.py   what an error RocksDB raised means (locked, damaged, refused, a full or failing
              disk, ...), and the one wrapper that makes it a StorageError

In C (each with a Python path where it is not built): _entries.c (index entries, the
KeyFilter, staging and versioning a batch's writes), _history_walk.c (the walk of a key's
versions), _ordered.c (a batch's values into its WriteBatch in key order).
"""

from globalstore.storage.database import Storage
from globalstore.storage.lock import LOCK_FILE, DirLock
from globalstore.storage.options import rocksdb_options
from globalstore.storage.records import Applied, Record, Records
from globalstore.storage.state import StorageState

__all__ = [
    "LOCK_FILE",
    "Applied",
    "DirLock",
    "Record",
    "Records",
    "Storage",
    "StorageState",
    "rocksdb_options",
]
