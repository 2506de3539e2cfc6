"""The versions of a store with history, written in C (_entries.Versioned) and by the Python
Recorder it stands in for, through the Python loop and through the C loop's way in (each
delete given its record), in a bulk restore (old values read only for keys it wrote before)
and while following (every old value read), in batches that replace keys within a batch and
across batches and apply a record again: every entry of both column families the same, byte
for byte, in history layout 3, and the entries those of a replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from globalstore.codec import format_headers
from globalstore.storage import Record, Storage, version_recorder
from globalstore.storage.versions import PREFIX, version_key
from tests.unit.store_fakes import LikeTheCLoop

TOPIC = "t"
DECLARED = format_headers()


def _records() -> list[Record]:
    """Puts and tombstones over three partitions: keys holding zero bytes (escaped in the
    entry), a key in two partitions, offsets past 2**32, a timestamp of -1 (none), a key
    that is not UTF-8 (skipped) and one without a key (a transform's failure: offset only)."""
    out: list[Record] = []
    for n in range(300):
        p = n % 3
        key = b"k\x00%d" % (n % 40) if n % 7 == 0 else b"k%d" % (n % 50)
        value = None if n % 5 == 0 else b'{"n": %d}' % n
        out.append((key, value, DECLARED, p, 2**33 + n if p == 2 else n, 10_000 + n))
    out += [
        (b"\x00", b"{}", DECLARED, 0, 900, -1),
        (b"\x00", None, DECLARED, 1, 901, 5),
        (b"\xff\xfe", b"{}", DECLARED, 0, 902, 6),
        (None, None, None, 1, 903, 7),
        (b"k1", None, None, 0, 904, 8),
    ]
    return out


def _batches(records: list[Record]) -> list[list[Record]]:
    """`records` in three batches, then a fourth that applies again the last put of a key
    no later record writes (a record the store has: the current value's own), with a new
    record (a batch that moves no offset is not written)."""
    last = _last_put(records)
    return [
        records[:100],
        records[100:200],
        records[200:],
        [last, (b"z", b"{}", DECLARED, 0, 905, 9)],
    ]


def _last_put(records: list[Record]) -> Record:
    """The last record of the UTF-8 keys that puts a value no later record replaces."""
    later: set[bytes | None] = set()
    for record in reversed(records):
        if record[1] is not None and record[0] not in later and record[0] != b"\xff\xfe":
            return record
        later.add(record[0])
    raise AssertionError("no such record")


def _written(
    path: Path, records: list[Record], c_loop: bool, follow: bool
) -> dict[str, list[tuple[bytes, bytes]]]:
    storage = Storage(path)
    try:
        storage.initialise(TOPIC, None, 1)
        storage.load(storage.read_meta())
        storage.history.define(10**13, 0)
        for batch in _batches(records):
            if c_loop:
                storage.apply_native(LikeTheCLoop(batch), 0.0, 1, exact_count=follow)
            else:
                storage.apply(batch, {}, follow, 1, list_keys=False)
        index = storage.index
        assert index is not None
        return {
            "data": storage.keys_from(None, 1 << 20),
            "index": list(index.items_from(b"")),
        }
    finally:
        storage.close()


def _replayed(records: list[Record]) -> set[bytes]:
    """The version entries layout 3 keeps for `records`: each value a record replaced, under
    its own partition and offset, and each tombstone."""
    entries: set[bytes] = set()
    last: dict[bytes, tuple[int, int] | None] = {}
    for key, value, _, p, o, _ts in records:
        if key is None or key == b"\xff\xfe":  # not applied: no key, or not UTF-8
            continue
        old = last.get(key)
        if old is not None and old != (p, o):
            entries.add(version_key(key, *old))
        if value is None:
            entries.add(version_key(key, p, o))
        last[key] = None if value is None else (p, o)
    return entries


def test_the_c_writer_is_built_here() -> None:
    assert version_recorder._entries is not None


@pytest.mark.parametrize("follow", [False, True], ids=["bulk", "follow"])
@pytest.mark.parametrize("c_loop", [False, True], ids=["Python loop", "C loop"])
def test_the_c_writer_writes_the_entries_of_the_python_recorder(
    c_loop: bool, follow: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records()
    by_c = _written(tmp_path / "c", records, c_loop, follow)
    monkeypatch.setattr(version_recorder, "_entries", None)  # the Recorder as where it is not built
    by_python = _written(tmp_path / "py", records, c_loop=False, follow=follow)

    assert by_c == by_python
    # Not vacuous: every value replaced and every tombstone has its version, the current
    # values none; keys were replaced within a batch and across batches.
    versions = dict(e for e in by_c["index"] if e[0].startswith(PREFIX))
    applied = [r for batch in _batches(records) for r in batch]
    assert set(versions) == _replayed(applied)
    assert len(versions) == 232
    again = _last_put(records)
    assert again[0] is not None and version_key(again[0], again[3], again[4]) not in versions
    assert versions[version_key(b"\x00", 1, 901)] == b"\x00" + (5).to_bytes(8, "big") + bytes(
        [0, 0, 0, 1]
    )
    assert versions[version_key(b"\x00", 0, 900)][22:] == b"{}"  # replaced by the tombstone
    assert versions[version_key(b"k\x0014", 2, 2**33 + 14)][22:] == b'{"n": 14}'
