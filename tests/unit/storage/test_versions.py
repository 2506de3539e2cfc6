"""The versions of a store with history, written in C (_entries.Versioned) and by the Python
Recorder it stands in for, through the Python loop and through the C loop's way in (each
delete given its record): every entry of both column families the same, byte for byte, in
history layout 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from globalstore.codec import format_headers
from globalstore.storage import Record, Storage, history
from globalstore.storage.history import PREFIX, version_key
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


def _written(
    path: Path, records: list[Record], c_loop: bool
) -> dict[str, list[tuple[bytes, bytes]]]:
    storage = Storage(path)
    try:
        storage.initialise(TOPIC, None, 1)
        storage.load(storage.read_meta())
        storage.history.define(10**13, 0)
        if c_loop:
            storage.apply_native(LikeTheCLoop(records), 0.0, 1)
        else:
            storage.apply(records, {}, False, 1, list_keys=False)
        index = storage.index
        assert index is not None
        return {
            "data": storage.keys_from(None, 1 << 20),
            "index": list(index.items_from(b"")),
        }
    finally:
        storage.close()


def test_the_c_writer_is_built_here() -> None:
    assert history._entries is not None


@pytest.mark.parametrize("c_loop", [False, True], ids=["Python loop", "C loop"])
def test_the_c_writer_writes_the_entries_of_the_python_recorder(
    c_loop: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records()
    by_c = _written(tmp_path / "c", records, c_loop)
    monkeypatch.setattr(history, "_entries", None)  # the Recorder as where it is not built
    by_python = _written(tmp_path / "py", records, c_loop=False)

    assert by_c == by_python
    # Not vacuous: every record with a UTF-8 key has its version, tombstones included.
    versions = dict(e for e in by_c["index"] if e[0].startswith(PREFIX))
    kept = [r for r in records if r[0] is not None and r[0] != b"\xff\xfe"]
    assert len(versions) == len(kept) == 303
    assert versions[version_key(b"\x00", 1, 901)] == b"\x00" + (5).to_bytes(8, "big") + bytes(
        [0, 0, 0, 1]
    )
    assert versions[version_key(b"k\x0014", 2, 2**33 + 14)][22:] == b'{"n": 14}'
