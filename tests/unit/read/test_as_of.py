"""Reads as of a time without a broker, on real RocksDB: the version each read returns
checked against an independent replay of the same records (tombstones, timestamps that go
backwards, two partitions, a key written twice in a batch), the purge that keeps every
answer inside the window, the horizon error, expiry under a ttl at the time asked, status,
and versions written in the value's own WriteBatch."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore import ReadOnlyStore
from globalstore.aio import AsyncReadOnlyStore
from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError, HistoryUnavailable
from globalstore.follow.plan import rebuild_reason
from globalstore.follow.topic import Marks, TopicInfo
from globalstore.read.report import history_status
from globalstore.shaping.history import Prune
from globalstore.storage import Record, Storage
from globalstore.storage.meta import I64, K_HISTORY_LAYOUT
from globalstore.storage.versions import PREFIX
from tests.unit.shaping.test_indexes import TOPIC, _View

WINDOW_MS = 10**13  # wide enough that nothing a test writes is outside it


def _open(path: Path, window_ms: int | None = WINDOW_MS, from_ms: int = 0) -> Storage:
    storage = Storage(path)
    if storage.read_meta().layout is None:
        storage.initialise(TOPIC, None, 1)
    storage.load(storage.read_meta())
    storage.history.define(window_ms, from_ms)
    return storage


def _rec(key: str, value: Any, ts: int, p: int, o: int) -> Record:
    raw = None if value is None else orjson.dumps(value)
    return (key.encode(), raw, None, p, o, ts)


def _replay(records: list[Record], key: str, t: int) -> Any:
    """The value of `key` as of t by the documented rule, from the records alone: in each
    partition its last record with timestamp <= t; of those, the greatest (timestamp,
    partition)."""
    last: dict[int, tuple[int, bytes | None]] = {}
    for k, v, _, p, _o, ts in records:  # in offset order within each partition
        if k == key.encode() and ts <= t:
            last[p] = (ts, v)
    if not last:
        return None
    _, _, value = max((ts, p, v or b"") for p, (ts, v) in last.items())
    return orjson.loads(value) if value else None


def _random_records(rng: random.Random, n: int, moves: bool = False) -> list[Record]:
    """Records of 12 keys over two partitions; with `moves`, a key's partition changes
    midway (as when partitions are added)."""
    offsets = {0: 0, 1: 0}
    out = []
    for i in range(n):
        key = rng.randrange(12)
        p = (key + (moves and i > n // 2)) % 2
        # Timestamps mostly rise, and sometimes go back (a producer's clock, CreateTime).
        ts = 1_000 + offsets[p] * 10 + rng.choice((0, 0, 0, -35, 7))
        value = None if rng.random() < 0.2 else {"n": rng.randrange(1000)}
        out.append(_rec(f"k{key}", value, ts, p, offsets[p]))
        offsets[p] += 1
    return out


def _written(
    path: Path, rng: random.Random, n: int, moves: bool, follow: bool = True
) -> tuple[Storage, list[Record]]:
    """A store with history holding `n` random records, applied in batches of 1 to 9, as
    a follower does or (not `follow`) as a bulk restore into an empty store does."""
    storage = _open(path)
    records = _random_records(rng, n, moves)
    _apply_in_batches(storage, records, rng, follow)
    return storage, records


def _apply_in_batches(
    storage: Storage, records: list[Record], rng: random.Random, follow: bool = True
) -> None:
    """Apply `records` in batches of 1 to 9."""
    i = 0
    while i < len(records):
        step = rng.randint(1, 9)
        storage.apply(records[i : i + step], {}, follow, 1)
        i += step


@pytest.mark.parametrize("follow", [True, False], ids=["following", "bulk-restore"])
@pytest.mark.parametrize("moves", [False, True], ids=["fixed-partitions", "keys-move"])
def test_every_read_as_of_a_time_equals_a_replay_of_the_records(
    tmp_path: Path, moves: bool, follow: bool
) -> None:
    rng = random.Random(45)
    storage, records = _written(tmp_path / "s", rng, 400, moves, follow)
    view, keys = _View(storage), sorted({r[0].decode() for r in records if r[0] is not None})
    times = [rng.randrange(900, 3_200) for _ in range(60)] + [10**12]
    for t in times:
        want = {k: v for k in keys if (v := _replay(records, k, t)) is not None}
        assert {k: view.get(k, as_of=t / 1000) for k in want} == want
        assert [k for k in keys if view.get(k, as_of=t / 1000) is None] == [
            k for k in keys if k not in want
        ]
        assert dict(view.items(as_of=t / 1000)) == want
        assert list(view.keys(as_of=t / 1000, reverse=True)) == sorted(want, reverse=True)
        assert view.get_many(keys, as_of=t / 1000) == want
        assert dict(view.items(prefix="k1", as_of=t / 1000)) == {
            k: v for k, v in want.items() if k.startswith("k1")
        }
    if not moves:  # after every timestamp, as of a time is now: the current values
        assert dict(view.items(as_of=10**9)) == dict(view.items())
    storage.close()


def test_get_entry_as_of_names_the_record_and_a_datetime_is_a_time(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s")
    storage.apply([_rec("a", {"v": 1}, 1_000, 0, 0), _rec("a", {"v": 2}, 2_000, 0, 1)], {}, True, 1)
    storage.apply([_rec("a", None, 3_000, 0, 2)], {}, True, 1)
    view = _View(storage)
    entry = view.get_entry("a", as_of=1.5)
    assert entry is not None and (entry.value, entry.timestamp, entry.offset) == ({"v": 1}, 1000, 0)
    at = dt.datetime.fromtimestamp(2.5, dt.UTC)
    assert view.get("a", as_of=at) == {"v": 2}
    assert view.get("a", as_of=3.0) is None  # the tombstone's own millisecond
    assert view.get("a", as_of=0.5, default="none") == "none"
    assert view.get("a") is None
    with pytest.raises(ValueError, match="aware"):
        view.get("a", as_of=dt.datetime(2026, 1, 1))  # naive on purpose
    for far in (1e100, -1e20, 10**30):  # no datetime names them: a mistake, said so
        with pytest.raises(ValueError, match="between the years 1 and 9999"):
            view.get("a", as_of=far)
    storage.close()


def test_to_arrow_as_of_a_time_has_the_rows_of_then(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s")
    storage.apply([_rec("a", {"v": 1}, 1_000, 0, 0), _rec("b", {"v": 1}, 1_000, 0, 1)], {}, True, 1)
    storage.apply([_rec("a", {"v": 2}, 2_000, 0, 2), _rec("b", None, 2_000, 0, 3)], {}, True, 1)
    table = _View(storage).to_arrow(as_of=1.5).read_all()
    assert table.column("key").to_pylist() == ["a", "b"]
    one_second = dt.datetime.fromtimestamp(1, dt.UTC)
    assert table.column("timestamp").to_pylist() == [one_second, one_second]
    assert _View(storage).to_arrow(as_of=2.5).read_all().column("key").to_pylist() == ["a"]
    storage.close()


def test_the_faces_over_files_answer_as_of_a_time(tmp_path: Path) -> None:
    """ReadOnlyStore and its async face read the history the writer kept, as it recorded
    it (window and horizon from the meta column family)."""
    storage = _open(tmp_path / "s", from_ms=500)
    storage.apply([_rec("a", 1, 1_000, 0, 0), _rec("a", 2, 2_000, 0, 1)], {}, True, 1)
    storage.close()
    with ReadOnlyStore(tmp_path / "s") as files:
        assert files.get("a", as_of=1.5) == 1 and files.get("a") == 2
        with pytest.raises(HistoryUnavailable):
            files.get("a", as_of=0.4)
        status = files.status().history
        assert status is not None and status.complete_from == 0.5

    async def read() -> Any:
        async with AsyncReadOnlyStore(tmp_path / "s") as store:
            return store.get("a", as_of=1.5), dict(store.items(as_of=2.0))

    assert asyncio.run(read()) == (1, {"a": 2})


def test_a_key_with_a_nul_keeps_its_versions_apart(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s")
    storage.apply(
        [_rec("a", 1, 1_000, 0, 0), _rec("a\x00b", 2, 1_000, 0, 1), _rec("a", 3, 2_000, 0, 2)],
        {},
        True,
        1,
    )
    view = _View(storage)
    assert dict(view.items(as_of=1.5)) == {"a": 1, "a\x00b": 2}
    assert dict(view.items(as_of=2.5)) == {"a": 3, "a\x00b": 2}
    assert view.get("a\x00b", as_of=2.5) == 2
    storage.close()


@pytest.mark.parametrize("moves", [False, True], ids=["fixed-partitions", "keys-move"])
def test_the_purge_keeps_every_answer_inside_the_window(tmp_path: Path, moves: bool) -> None:
    rng = random.Random(7)
    storage, records = _written(tmp_path / "s", rng, 300, moves)
    view, keys = _View(storage), sorted({r[0].decode() for r in records if r[0] is not None})
    cutoff = 2_000
    before, current = _versions(storage), dict(view.items())
    while storage.history.purge(cutoff, 7).more:  # small chunks: a sweep in many steps
        pass
    after = _versions(storage)
    assert after < before  # it removed some
    for t in [cutoff, *(rng.randrange(cutoff, 3_200) for _ in range(40)), 10**12]:
        want = {k: v for k in keys if (v := _replay(records, k, t)) is not None}
        assert dict(view.items(as_of=t / 1000)) == want
    # The current values were never touched, and a second sweep finds nothing more.
    assert dict(view.items()) == current
    assert storage.history.purge(cutoff, 1_000).removed == 0
    storage.close()


def _versions(storage: Storage) -> int:
    assert storage.index is not None
    return sum(1 for k in storage.index.keys(PREFIX, b"i", 10**9))


def test_the_store_threads_prune_purges_versions_older_than_the_window(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s", window_ms=60_000)
    now = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    old, recent = now - 3_600_000, now - 1_000
    storage.apply([_rec("a", 1, old, 0, 0), _rec("a", 2, old + 1, 0, 1)], {}, True, 1)
    storage.apply([_rec("a", 3, recent, 0, 2), _rec("b", None, old, 0, 3)], {}, True, 1)
    prune = Prune(storage.history, 60_000, chunk=1, idle=0.0)
    for _ in range(6):  # one key per step, and a step that finds the end
        prune.step()
    assert prune.pruned == 2
    # Kept: a=2's entry (the answer at the window's start; a=3 is the current value, no
    # entry); a=1's went, and so did b's lone tombstone.
    assert _versions(storage) == 1
    view = _View(storage)
    assert view.get("a", as_of=(now - 30_000) / 1000) == 2
    assert view.get("a", as_of=now / 1000) == 3
    storage.close()


def test_a_read_older_than_the_horizon_names_the_oldest_time(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s", window_ms=WINDOW_MS, from_ms=5_000)
    storage.apply([_rec("a", 1, 4_000, 0, 0)], {}, True, 1)
    view = _View(storage)
    assert view.get("a", as_of=5.0) == 1
    for read in (
        lambda: view.get("a", as_of=4.999),
        lambda: view.get_entry("a", as_of=4.0),
        lambda: view.get_many(["a"], as_of=4.0),
        lambda: list(view.items(as_of=4.0)),
        lambda: list(view.values(as_of=4.0)),
        lambda: list(view.entries(as_of=4.0)),
    ):
        with pytest.raises(HistoryUnavailable, match="oldest time it can answer") as caught:
            read()
        assert caught.value.oldest == 5.0
    status = history_status(storage.state)
    assert status is not None and status.oldest == 5.0 and status.complete_from == 5.0
    # A store restarted later is complete only from its new start: the horizon moves on.
    storage.history.define(WINDOW_MS, 6_000)
    with pytest.raises(HistoryUnavailable):
        view.get("a", as_of=5.5)
    storage.close()


def test_a_store_without_history_refuses_every_read_as_of_a_time(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s", window_ms=None)
    storage.apply([_rec("a", 1, 4_000, 0, 0)], {}, True, 1)
    view = _View(storage)
    with pytest.raises(HistoryUnavailable, match="keeps no history") as caught:
        view.get("a", as_of=5.0)
    assert caught.value.oldest is None
    assert history_status(storage.state) is None
    assert storage.index is None  # and nothing is written for it: no cost when off
    storage.close()


def test_ttl_at_the_time_asked_a_key_expired_then_reads_absent(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s")
    storage.apply([_rec("a", 1, 10_000, 0, 0)], {}, True, 1)
    view = _View(storage)
    storage.state = dataclasses.replace(storage.state, ttl_ms=5_000)  # a ttl of 5 s
    assert view.get("a", as_of=12.0) == 1  # before its expiry
    assert view.get("a", as_of=14.999) == 1
    assert view.get("a", as_of=15.001) is None  # after it
    assert dict(view.items(as_of=15.5)) == {}
    assert dict(view.items(as_of=11.0)) == {"a": 1}
    storage.close()


def test_the_ttl_purge_keeps_a_value_it_deletes_as_its_version(tmp_path: Path) -> None:
    storage = _open(tmp_path / "s")
    storage.time.define(5_000, bulk=False)  # a ttl of 5 s: a time index, built at once
    storage.apply([_rec("old", 1, 1_000, 0, 0), _rec("young", 1, 9_000, 0, 1)], {}, True, 1)
    assert _versions(storage) == 0  # current values only
    # The ttl's purge at 7 s deletes "old" (1 s + 5 s < 7 s): its value becomes its version.
    assert storage.time.purge(7_000 - 5_000, 100)[1] == [b"old"]
    assert storage.get(b"old") is None and _versions(storage) == 1
    view = _View(storage)
    assert view.get("old", as_of=5.0) == 1 and view.get("old", as_of=6.5) is None
    assert view.get("young", as_of=9.0) == 1
    # At the cutoff 10 s "old" is expired and stays so: its version goes; "young" (9 s),
    # a current value, still answers at the cutoff.
    assert storage.history.purge(10_000, 100).removed == 1
    assert _versions(storage) == 0
    assert view.get("young", as_of=10.0) == 1 and view.get("old", as_of=10.0) is None
    storage.close()


def test_versions_are_written_in_the_values_own_write_batch(tmp_path: Path) -> None:
    """The crash argument: RocksDB writes a WriteBatch whole or not at all, and the version
    goes into the same WriteBatch as the value and the offset; so after a crash at any
    instant a value and its version are both there or both gone."""
    storage = _open(tmp_path / "s")
    written: list[Any] = []
    real_commit = storage.commit

    def commit(batch: Any) -> None:
        written.append(batch.wb.len())
        real_commit(batch)

    storage.commit = commit  # type: ignore[method-assign]
    storage.apply([_rec("a", 1, 1_000, 0, 0), _rec("b", None, 1_000, 0, 1)], {}, True, 1)
    storage.apply([_rec("a", 2, 2_000, 0, 2)], {}, True, 1)
    # One commit each: 2 data operations, b's tombstone, the offset, applied_at and the
    # count; then a's new value, its old one moved into its version, and the same three.
    assert written == [6, 5]
    storage.close()
    reopened = _open(tmp_path / "s")
    assert _versions(reopened) == 2
    reopened.close()


def test_history_is_a_setting_turning_it_on_rebuilds_and_off_drops(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="history"):
        StoreConfig(TOPIC, "f:1", tmp_path / "c", history=0)
    config = StoreConfig(TOPIC, "f:1", tmp_path / "c", history=3600)
    storage = _open(tmp_path / "s", window_ms=None)
    storage.apply([_rec("a", 1, 1_000, 0, 0)], {}, True, 1)
    meta = storage.read_meta()
    info = TopicInfo((0,), None, "compact", None)
    reason = rebuild_reason(meta, False, info, {0: Marks(0, 1, 1)}, config)
    assert reason is not None and "history" in reason.reason
    storage.history.define(3_600_000, 0)
    storage.apply([_rec("a", 2, 2_000, 0, 1)], {}, True, 1)
    assert rebuild_reason(storage.read_meta(), False, info, {0: Marks(0, 2, 2)}, config) is None
    storage.history.define(None, 0)  # off: versions dropped, the store kept
    assert _versions(storage) == 0 and storage.read_meta().history_ms is None
    assert _View(storage).get("a") == 2
    storage.close()


@pytest.mark.parametrize(
    "layout", [None, 2, 4], ids=["the-first-layout", "the-second-layout", "a-newer-layout"]
)
def test_versions_of_another_layout_are_rebuilt_never_misread(
    tmp_path: Path, layout: int | None
) -> None:
    """Layout 1 kept a key's versions in (offset, partition) order, layout 2 kept the current
    value as an entry too; this code keeps them by partition, newest first, the current
    value only in the data. A store whose meta names another layout (absent: the first) is
    rebuilt by a writer, and a reader refuses every read as of a time."""
    storage = _open(tmp_path / "s")
    storage.apply([_rec("a", 1, 1_000, 0, 0), _rec("a", 2, 2_000, 0, 1)], {}, True, 1)
    storage.put_meta(K_HISTORY_LAYOUT, None if layout is None else I64.pack(layout))
    storage.load(storage.read_meta())
    config = StoreConfig(TOPIC, "f:1", tmp_path / "c", history=3600)
    info = TopicInfo((0,), None, "compact", None)
    reason = rebuild_reason(storage.read_meta(), False, info, {0: Marks(0, 2, 2)}, config)
    assert reason is not None and f"history layout {layout or 1}" in reason.reason
    with pytest.raises(HistoryUnavailable, match=f"history layout {layout or 1}") as caught:
        _View(storage).get("a", as_of=1.5)
    assert caught.value.oldest is None
    assert _View(storage).get("a") == 2  # reads of now are not concerned
    storage.close()
