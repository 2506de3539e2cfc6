"""Opening a store's RocksDB: the access it is opened with (read-write, read-only, or as a
secondary instance that catches up with the writer), the column families it has, and what a
database RocksDB cannot open leads to: a refusal, or a wipe when its own files are damaged."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import rocksdict

from globalstore.config import RocksDBOptions
from globalstore.storage.failures import open_refusal, reported
from globalstore.storage.meta import INDEX_CF, META_CF
from globalstore.storage.options import rocksdb_options

__all__ = ["db_dir", "open_rdict"]

log = logging.getLogger(__name__)


def db_dir(path: Path) -> Path:
    """Where the database of the store directory `path` lives, beside its lock."""
    return path / "db"


def open_rdict(
    path: Path, options: RocksDBOptions, read_only: bool, secondary: Path | None
) -> tuple[rocksdict.Rdict, bool]:
    """The database of the store at `path`, and whether it has the index column family. A
    database RocksDB cannot make sense of is wiped and opened empty, unless `read_only`: the
    topic is the source of truth. Any other failure is a refusal (failures.open_refusal)."""
    try:
        return _open(path, options, read_only, secondary)
    except Exception as exc:
        refusal = open_refusal(exc, path, wipe=not read_only)
        if refusal is not None:
            raise refusal from exc
        log.warning("store %s is damaged (%s); wiping it to rebuild", path, str(exc))
        shutil.rmtree(db_dir(path), ignore_errors=True)
        with reported(f"opening RocksDB in {path} after wiping it", path):
            return _open(path, options, read_only, secondary)


def _open(
    path: Path, options: RocksDBOptions, read_only: bool, secondary: Path | None
) -> tuple[rocksdict.Rdict, bool]:
    opts = rocksdb_options(options)
    if secondary is not None:
        access = rocksdict.AccessType.secondary(str(secondary))
        # The writer deletes the table files a compaction replaced; a secondary that
        # keeps every file it uses open still reads them until it next catches up.
        opts.set_max_open_files(-1)
        # Each catch-up loads the table files it adds with this many threads, created
        # anew every time: 16 (the default) made a catch-up cost 770 µs, 1 makes it 17.
        opts.set_max_file_opening_threads(1)
    elif read_only:
        access = rocksdict.AccessType.read_only()
    else:
        access = rocksdict.AccessType.read_write()
    where = str(db_dir(path))
    families = {META_CF: opts}
    # The index family exists once an index was defined (Storage.index_family creates it).
    has_index = INDEX_CF in _families(where, opts)
    if has_index:
        families[INDEX_CF] = opts
    db = rocksdict.Rdict(where, opts, column_families=families, access_type=access)
    return db, has_index


def _families(where: str, opts: rocksdict.Options) -> list[str]:
    """The column families of the database in `where` (none if there is none)."""
    try:
        return list(rocksdict.Rdict.list_cf(where, opts))
    except Exception:
        return []
