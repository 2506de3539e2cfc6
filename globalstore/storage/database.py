"""Storage: a locked RocksDB database holding one topic's keys plus the meta column family.

On disk, in the store directory:
    globalstore.lock   fcntl lock held while open (one process per directory)
    RocksDB files      column family "default": key -> codec layout (header + value bytes)
                       column family "meta":    layout version, topic, offsets, counters
                       column family "index":   secondary and time index entries (keys.py),
                                                only once an index is defined

Every write is one Batch (batch.py), written by commit(), which then publishes the state it
carries. Every apply() is ONE WriteBatch holding the records and the next offset of each partition
they came from (contract 2), so after a crash the stored offsets never run ahead of the data
(nor does a quarantine, quarantine.py). It takes plain records (records.Record), never a
Kafka message.

The indexes it holds, secondary (index_defs.py, at `indexes`) and the ttl's time index
(timeindex.py, at `time`), keep entries derived from the data: apply() puts theirs in its
batch, and they commit their own batches through the members host.IndexHost names.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import rocksdict

from globalstore.config import RocksDBOptions
from globalstore.errors import StorageError
from globalstore.storage.batch import Batch, ValueOrder
from globalstore.storage.cache import HotValues
from globalstore.storage.failures import close_when_unborrowed, reported
from globalstore.storage.history import History
from globalstore.storage.index_defs import SecondaryIndexes
from globalstore.storage.index_family import IndexFamily
from globalstore.storage.lock import DirLock, NoLock
from globalstore.storage.meta import (
    I64,
    INDEX_CF,
    INDEX_PREFIX,
    INVALID_PREFIX,
    K_COUNT,
    K_IN_SYNC_AT,
    K_INVALID_HELD,
    META_CF,
    OFFSET_PREFIX,
    Meta,
    parse_meta,
)
from globalstore.storage.opening import db_dir, open_rdict
from globalstore.storage.options import rocksdb_options
from globalstore.storage.pinned import Cursor, Pinned, SeekingValues
from globalstore.storage.quarantine import Quarantine, held, marked
from globalstore.storage.records import Applied, NativeBatch, Records
from globalstore.storage.rules import ValueCheck, WriteRules
from globalstore.storage.scan import Recount, scan_items, uncached
from globalstore.storage.state import StorageState
from globalstore.storage.timeindex import TimeIndex

__all__ = ["Storage"]

_PLAIN = WriteRules()  # a store that only stores records


class Storage:
    """A locked RocksDB database holding one topic's keys plus the meta column family."""

    def __init__(
        self,
        path: Path | str,
        options: RocksDBOptions | None = None,
        *,
        read_only: bool = False,
        secondary: Path | None = None,
        lock: DirLock | None = None,
        rules: WriteRules = _PLAIN,
    ) -> None:
        """Lock and open (creating) the store at `path`. read_only=True opens an existing
        store without its lock, as RocksDB's read-only mode: it sees what was written up to
        now, even while another process runs the store, and can never write. `secondary`
        (a directory of its own) opens it read-only as a RocksDB secondary instance, which
        catch_up() then brings up to what the writing process has written since. `lock`,
        the directory's lock already taken (GlobalStore.start installs a snapshot under it),
        is then the storage's own, released by close(). `rules`: what its writes do beyond
        storing records (rules.py), carried out on its files by define()."""
        self.path = Path(path)
        self._options = options or RocksDBOptions()
        self._secondary = secondary
        self.read_only = read_only or secondary is not None
        if self.read_only and not (db_dir(self.path) / "CURRENT").exists():
            raise StorageError(f"no store at {self.path}")
        self._lock = (
            lock if lock is not None else NoLock() if self.read_only else DirLock(self.path)
        )
        # Only this thread-safe reference is ever replaced: by commit() after each write.
        self.state = StorageState()
        self._recount: Recount | None = None
        # The pass after a bulk restore: the key its next step starts from (None: none runs).
        self._undecodable_from: bytes | None = None
        # The indexes it holds write through its IndexHost members (host.py).
        self.rules = rules
        self.indexes = SecondaryIndexes(self, rules.indexer)  # index_defs.py
        self.time = TimeIndex(self, self.indexes)  # a store with a ttl keeps it (timeindex.py)
        # The check of every value put, with the keys it holds, once define() read them.
        self.quarantine: Quarantine | None = None
        self.history = History(self)  # a store with history keeps versions (history.py)
        self._value_order = ValueOrder()  # whether its batches' values go in sorted (batch.py)
        # Held while writing, and while a reader opens its two iterators (values and index
        # entries): then both see the database at the same sequence number.
        self.view_lock = threading.Lock()
        # The decoded values of hot keys its reads keep (cache.py), once hot_values() made it.
        self.hot: HotValues | None = None
        # Called whenever the database is opened again (a wipe, a secondary's new column
        # family): whoever keeps its point_get() takes the new one (read/copy.py).
        self._reopened: list[Callable[[], None]] = []
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    def _open(self) -> None:
        self._db, has_index = open_rdict(self.path, self._options, self.read_only, self._secondary)
        self._meta_cf = self._db.get_column_family_handle(META_CF)
        self._meta = self._db.get_column_family(META_CF)
        self._index = IndexFamily(self._db) if has_index else None
        self._get = self._db.get
        for reopened in self._reopened:
            reopened()
        self._logged = rocksdict.WriteOptions()
        self._unlogged = rocksdict.WriteOptions()
        self._unlogged.disable_wal = True

    def close(self) -> None:
        """Close RocksDB, then release the directory lock (also if closing failed)."""
        try:
            self._close_db()
        finally:
            self._lock.release()

    def _close_db(self) -> None:
        # Every handle on the database must go before close(), or RocksDB keeps its LOCK.
        db = self.__dict__.pop("_db", None)
        self._recount = None  # its iterator is a handle on the database too
        for name in ("_meta", "_meta_cf", "_get", "_index"):
            self.__dict__.pop(name, None)
        if db is not None:
            close_when_unborrowed(db.close, self.path)

    @property
    def index(self) -> IndexFamily | None:
        """The index column family, None while the store has none."""
        return self._index

    def index_family(self) -> IndexFamily:
        """The index column family, created if the store has none yet."""
        if self._index is None:
            with self._writing():
                self._db.create_column_family(INDEX_CF, rocksdb_options(self._options))
            self._index = IndexFamily(self._db)
        return self._index

    def hot_values(self, entries: int, max_bytes: int) -> HotValues:
        """The cache of decoded values its reads keep, made on the first call: every write
        from then on drops from it what the write replaces."""
        if self.hot is None:
            self.hot = HotValues(entries, max_bytes)
        return self.hot

    def wipe(self, refill: Callable[[Path], object] | None = None) -> None:
        """Drop every key and all meta; the caller restores from the beginning. `refill`,
        given the store directory while the database is closed and gone, may put another
        database in its place (a snapshot): that one is opened instead."""
        with self._replacing():
            self._close_db()
            with reported(f"wiping the store at {self.path}", self.path):
                shutil.rmtree(db_dir(self.path), ignore_errors=True)
                if refill is not None:
                    refill(self.path)
            self._open()
        self.state = StorageState()
        self.indexes.forget_written()
        self.history.forget_written()

    @contextlib.contextmanager
    def _replacing(self, keys: Iterable[bytes] | None = None) -> Iterator[None]:
        """Around a change of what the database holds: the values of `keys` (None: of any
        key) leave the cache first, and none read meanwhile is kept (cache.py)."""
        hot = self.hot
        if hot is None:
            yield
            return
        hot.writing(keys)
        try:
            yield
        finally:
            hot.written()

    # -- meta --------------------------------------------------------------------------------

    def read_meta(self) -> Meta:
        """Parse the meta column family; DamagedLayoutError if any entry does not parse."""
        return parse_meta(
            self._meta.get, self.meta_items(OFFSET_PREFIX), self.meta_items(INDEX_PREFIX)
        )

    def meta_items(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The meta column family's entries in key order from `start` on."""
        return self._meta.items(from_key=start)

    def load(self, meta: Meta) -> None:
        """Adopt positions, count, layout, last restore time and indexes from meta."""
        index = self._index
        entries = {n: 0 if index is None else index.entries(d.id) for n, d in meta.indexes.items()}
        state = self.time.loaded(StorageState.of(meta, entries), meta)
        self.state = self.history.loaded(state, meta)

    def define(self, *, bulk: bool, now_ms: int) -> None:
        """Carry out the rules on what the store holds, before any record is applied and once
        that is settled (a wipe or a snapshot install replaces it): keep the rules' indexes,
        time index and window of history in the meta, dropping those they do not name, and
        read the keys the quarantine holds. A `bulk` restore builds the time index after it
        (timeindex.py); history is complete from `now_ms` on."""
        rules = self.rules
        self.indexes.define(rules.indexes, rules.index_paths)
        self.time.define(rules.ttl_ms, bulk)
        self.quarantine = None if rules.values is None else self._quarantine(rules.values)
        self.history.define(rules.history_ms, now_ms)

    def _quarantine(self, values: ValueCheck) -> Quarantine | None:
        """The check of each value put, holding the keys held (or marked) already. A store
        that stores undecodable values and was written before they were counted (no count
        in its meta) checks none: the count would not be exact (a rebuild starts one)."""
        if values.withhold:
            keys = [q.key.encode("utf-8") for q in held(self.meta_items)]
        elif self.state.undecodable is None and not self.state.undecodable_counting:
            return None
        else:
            keys = list(marked(self.meta_items))
        return Quarantine(
            values.check, keys, values.plain, withhold=values.withhold, where=str(self.path)
        )

    def catch_up(self) -> None:
        """A secondary instance: read what the writer logged since the last call (its
        write-ahead log and manifest), and adopt the meta it now holds as the state."""
        # Which keys the writer wrote is not known here: the whole cache goes.
        # Not between a reader's two iterators, nor between a view's snapshots and the state
        # it takes with them (pinned()).
        with (
            reported(f"catching up with the writer of {self.path}", self.path),
            self._replacing(),
            self.view_lock,
        ):
            self._db.try_catch_up_with_primary()
            meta = self.read_meta()
            if self._index is None and (
                meta.indexes or meta.time_index is not None or meta.history_ms is not None
            ):
                # The writer defined the first index (or a time index) since this
                # instance opened, and a secondary cannot open a column family later:
                # open again.
                self._close_db()
                self._open()
            self.load(meta)

    def mark_restored(self, now_ms: int) -> None:
        """Record that a restore reached its end offsets (kept across restarts for status)."""
        batch = self.batch(data=False)
        batch.mark_restored(now_ms)
        self.commit(batch)

    def mark_in_sync(self, now_ms: int) -> None:
        """Record that the store holds the topic's end at this wall time."""
        self.put_meta(K_IN_SYNC_AT, I64.pack(now_ms))

    def initialise(
        self,
        topic: str | None,
        topic_id: str | None,
        now_ms: int,
        more: Mapping[bytes, bytes] | None = None,
    ) -> None:
        """Mark an empty store as current layout, for this topic, with the `more` meta
        entries its config asks for (transform.py). Its retention clock starts now:
        everything it will read was in the topic at this moment or later."""
        batch = self.batch(data=False)
        batch.initialise(topic, topic_id, now_ms, more or {})
        self.commit(batch)

    def put_meta(self, key: bytes, value: bytes | None) -> None:
        """Put (None: delete) one meta entry, in a batch of its own."""
        batch = self.batch(data=False)
        batch.put_meta(key, value)
        self.commit(batch)

    def get_meta(self, key: bytes) -> bytes | None:
        """The raw value of one meta entry, None if absent."""
        return self._meta.get(key)

    def is_empty(self) -> bool:
        """Whether the store holds no data key (meta entries do not count)."""
        for _ in self._db.keys():  # noqa: SIM118 - Rdict.__iter__ fails in raw mode
            return False
        return True

    # -- writes ------------------------------------------------------------------------------

    def apply(
        self,
        records: Records,
        ends: Mapping[int, int],
        exact_count: bool,
        now_ms: int,
        list_keys: bool = True,
    ) -> Applied:
        """Write a consumed batch and the offsets it covers in one WriteBatch (Batch.records
        says which offsets).

        exact_count=True looks up each distinct key of the batch (before writing it) to keep
        the live-key count exact: cheap for a small follow batch, but ~10 µs per key already
        on disk, so a bulk restore passes False, which marks the count unknown until a
        recount (see begin_recount) has caught up. Applied.present lists the batch's keys
        when exact_count or `list_keys` is set.

        A bulk apply also skips RocksDB's write-ahead log (a third of the restore's time went
        into writing it). Atomic flush (RocksDBOptions) persists both column families
        together, so a crash loses the unflushed batches, their offsets with them; the next
        start resumes from the last flushed ones. begin_recount flushes first."""
        batch = self.batch() if exact_count else self._bulk_batch()
        batch.recorder = self.history.recorder(batch.wb, bulk=not exact_count)
        batch.value_order = self._value_order
        listed = exact_count or list_keys
        out = batch.records(records, ends, self._tracks_writes, listed)
        batch.changed = out.present if listed else batch.staged
        return self._commit_applied(batch, out, exact_count, now_ms)

    def apply_native(
        self, restorer: NativeBatch, timeout: float, now_ms: int, exact_count: bool = False
    ) -> Applied:
        """Apply the batch the C loop consumes, written exactly as apply() writes the same
        records: a bulk restore (exact_count=False) or a follow batch of a store the C loop
        follows, which keeps the count exact and lists the batch's keys in Applied.present."""
        batch = self.batch() if exact_count else self._bulk_batch()
        batch.recorder = self.history.recorder(batch.wb, bulk=not exact_count)
        batch.value_order = self._value_order
        out = batch.native(restorer, timeout, self._tracks_writes or exact_count)
        if exact_count:
            staged = batch.staged or {}
            out.present = {key: value is not None for key, value in staged.items()}
        batch.changed = batch.staged
        return self._commit_applied(batch, out, exact_count, now_ms)

    @property
    def _indexed(self) -> bool:
        """Whether the store has secondary indexes: their writes need the keys' old values."""
        return self.indexes.indexer is not None

    @property
    def _tracks_writes(self) -> bool:
        """Whether a batch must note the keys it writes: the store indexes them."""
        return self._indexed or self.time.tracks_writes

    def _commit_applied(
        self, batch: Batch, out: Applied, exact_count: bool, now_ms: int
    ) -> Applied:
        """Add the index entries of the keys written, the moved offsets and the count to
        `batch` and commit it (nothing when no offset moved)."""
        moved = batch.moved()
        if not moved:
            return out
        count = None
        if exact_count:
            count = batch.count_exactly(out.present, self._get, keep=self._indexed)
        elif self._recount is not None:
            raise StorageError("a bulk apply cannot run while keys are being recounted")
        if batch.staged:
            self.indexes.into(
                batch, batch.staged, batch.state.indexes, bulk=not exact_count, olds=batch.olds
            )
            self.time.into(batch, batch.staged)
        batch.advance(moved, count, now_ms)
        batch.logged = exact_count
        self.commit(batch)
        batch.settle()
        out.moved = True
        return out

    def batch(self, data: bool = True) -> Batch:
        """A new write, from the state the store holds now (batch.py); data=False: of meta
        entries only, which leaves the cache of decoded values as it is."""
        batch = Batch(self.state, self._meta_cf, self.quarantine)
        if not data:
            batch.changed = ()
        return batch

    def _bulk_batch(self) -> Batch:
        """A bulk apply's write. A store that stores undecodable values as they came checks
        none of them there (the check was most of a cold restore's cost beyond the plain
        one): the batch marks the count unknown, and the pass once the store is ready
        (begin_undecodable_count) marks and counts them. A quarantining store checks each
        value, which decides whether it is stored."""
        quarantine = self.quarantine
        if quarantine is None or quarantine.withhold:
            return self.batch()
        batch = Batch(self.state, self._meta_cf)
        batch.uncount()
        return batch

    def begin_undecodable_count(self) -> bool:
        """Start the pass that marks and counts the undecodable values a bulk restore stored
        unchecked, if one is due (the store says so, in the meta of those values' batches,
        across restarts): whether it is. Call it from the writing thread, between applies;
        every apply from then on checks its values (Batch), so the pass only has to look at
        each key's current value once, in key order, between them. It starts over: the
        marks a pass cut short or an older restore left are dropped first."""
        quarantine = self.quarantine
        if not self.state.undecodable_counting or quarantine is None or quarantine.withhold:
            self._undecodable_from = None
            return False
        batch = self.batch(data=False)  # marks only: the cache of decoded values stays
        for key in list(marked(self.meta_items)):
            batch.put_meta(INVALID_PREFIX + key, None)
            batch.quarantining[key] = False
        self.commit(batch)
        batch.settle()
        self._undecodable_from = b""
        return True

    def undecodable_step(self, chunk: int) -> int | None:
        """Check up to `chunk` more stored values, marking those that do not decode (and
        unmarking those that do) in one batch; the count (also stored) once all are, else
        None."""
        start, quarantine = self._undecodable_from, self.quarantine
        if start is None or quarantine is None:
            raise StorageError("undecodable_step() without begin_undecodable_count()")
        pairs = list(itertools.islice(self._db.items(from_key=start, read_opt=uncached()), chunk))
        batch = self.batch(data=False)  # marks only: the cache of decoded values stays
        quarantine.remark(pairs, batch.put_meta, batch.quarantining)
        done = len(pairs) < chunk
        n = None
        if done:
            n = quarantine.count_after(batch.quarantining)
            batch.put_meta(K_INVALID_HELD, I64.pack(n))
            batch.change(undecodable=n, undecodable_counting=False)
            self._undecodable_from = None
        else:
            self._undecodable_from = pairs[-1][0] + b"\x00"  # the next key after it
        self.commit(batch)
        batch.settle()
        return n

    def commit(self, batch: Batch) -> None:
        """Write `batch` as one WriteBatch under the view lock, then publish the state it
        carries: every write of the store comes here, and makes one new state."""
        # The state too is published under the view lock: a view (pinned()) takes its
        # snapshots and the state together, so they are of the same batch.
        with self._writing(), self.view_lock:
            with self._replacing(batch.changed):
                self._db.write(batch.wb, self._logged if batch.logged else self._unlogged)
            if self._recount is not None:
                self._recount.delta += batch.live_delta
            self.state = batch.state

    def begin_recount(self) -> None:
        """Start counting live keys over a point-in-time iterator. Call it from the writing
        thread, between applies; exact applies from then on add their change to the result.
        It ends a bulk restore, so it first flushes what the bulk applies left unlogged."""
        self._flush()
        self._recount = Recount.of(self._db)

    def recount_step(self, chunk: int) -> int | None:
        """Count up to `chunk` more keys; the exact count (also stored) once done, else None."""
        recount = self._recount
        if recount is None:
            raise StorageError("recount_step() without begin_recount()")
        n = recount.step(chunk)
        if n is not None:
            self._recount = None
            batch = self.batch(data=False)
            batch.put_meta(K_COUNT, I64.pack(n))
            batch.change(count=n)
            self.commit(batch)
        return n

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        """Around every call that writes: RocksDB's errors become one StorageError."""
        return reported(f"writing to the store at {self.path}", self.path)

    def _flush(self) -> None:
        """Persist the memtables, data and index entries first: even without atomic flush the
        stored offsets could then never run ahead of the stored data and index. (The index
        entries a bulk restore wrote unlogged must be on disk before logged writes follow,
        as the data must.)"""
        with self._writing():
            self._db.flush()
            if self._index is not None:
                self._index.flush()
            self._meta.flush()

    def write_values(
        self, pairs: Iterable[tuple[bytes, bytes]], meta: dict[bytes, bytes | None] | None = None
    ) -> None:
        """Rewrite values and meta entries in one batch (migrations, repairs). The state's
        layout entries follow what the batch wrote to the meta column family."""
        batch = self.batch()
        batch.rewrite(pairs, meta or {})
        self.commit(batch)

    # -- reads -------------------------------------------------------------------------------

    @property
    def taken_ms(self) -> None:
        """None: the live storage's reads see the database as it is whenever asked (a Pinned
        one's, as it was when taken: reads.Reads)."""
        return None

    def pinned(self) -> Pinned:
        """The database as it is now, kept so for the reads of one view (pinned.py): an
        iterator over each column family, and the state, made with no write between them."""
        with self.view_lock:
            index = None if self._index is None else Cursor(self._index.iterator())
            data, meta = Cursor(self._db.iter()), Cursor(self._meta.iter())
            now_ms = int(time.time() * 1000)
            return Pinned(self.path, self.state, data, index, meta, now_ms)

    def live_count(self, cutoff_ms: int) -> int | None:
        """The stored count of live keys less those expired at `cutoff_ms` (timeindex.py)."""
        return self.time.live_count(cutoff_ms)

    def point_get(self) -> Callable[[bytes], bytes | None]:
        """RocksDB's own get, for the query hot path, valid until the database is opened
        again (on_reopen) or closed."""
        return self._get

    def on_reopen(self, call: Callable[[], None]) -> None:
        """Have `call` called each time the database is opened again: a wipe (a rebuild at
        start), or a secondary that opens anew to see a new column family."""
        self._reopened.append(call)

    def get(self, key: bytes) -> bytes | None:
        """The raw value of `key`, None if absent."""
        return self._get(key)

    def data_iterator(self) -> rocksdict.RdictIter:
        """An iterator over the data as it is now (a scan's: it fills no cache)."""
        return self._db.iter(uncached())

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of `keys` in their order (None where absent), with RocksDB's multi-get."""
        return self._db.get(keys)

    def scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, raw value) with lower <= key < upper, over one point-in-time view (scan.py)."""
        return scan_items(self._db, lower, upper, reverse)

    def index_scan(
        self, lower: bytes, upper: bytes, reverse: bool
    ) -> Iterator[tuple[bytes, bytes, bytes]]:
        """(index value, key, raw value) of the index entries in [lower, upper)
        (keys.bounds), in entry order or reversed: entries and values read at one
        sequence number."""
        index = self._index
        if index is None:
            return iter(())
        with self.view_lock:  # no write between the two: both see the same batches
            # A secondary's snapshot get reads the latest data (pinned.py): its values are
            # read with an iterator made now instead.
            values = (
                self._db.snapshot()
                if self._secondary is None
                else SeekingValues(Cursor(self._db.iter()))
            )
            return index.items(values, lower, upper, reverse)

    def index_count(self, lower: bytes, upper: bytes) -> int:
        """How many index entries lie in [lower, upper)."""
        return 0 if self._index is None else self._index.count(lower, upper)

    def keys_from(self, start: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (key, raw value) pairs from `start` on, for chunked migration."""
        return list(itertools.islice(self._db.items(from_key=start), max(0, limit)))

    def checkpoint(self, dest: Path) -> None:
        """A consistent copy of the database (data and meta, so its offsets) in `dest`, which
        must not exist: RocksDB flushes the memtables and hard-links the table files (copies
        them across file systems). Writers pause only for the flush."""
        with reported(f"checkpoint of {self.path} into {dest}", dest):
            rocksdict.Checkpoint(self._db).create_checkpoint(str(dest))
