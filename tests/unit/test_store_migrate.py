"""Layout 0 (bare JSON) -> 1 (header + JSON): readable at once, converted in resumable chunks."""

from __future__ import annotations

from pathlib import Path

import orjson

from globalstore import migrate
from globalstore.codec import HEADER_SIZE, LAYOUT_VERSION, UNKNOWN, decode, origin
from globalstore.meta import K_LAYOUT, K_MIGRATE_CURSOR, offset_key
from globalstore.storage import Storage
from tests.unit.store_fakes import batch


def _make_v0_store(path: Path, n: int) -> None:
    s = Storage(path)
    values = [(f"k{i:04d}".encode(), orjson.dumps({"i": i})) for i in range(n)]
    s.write_values(values, {K_LAYOUT: b"0", offset_key(0): (n).to_bytes(8, "big")})
    s.close()


def _open(path: Path) -> Storage:
    s = Storage(path)
    s.load(s.read_meta())
    return s


def test_layout_checks() -> None:
    assert migrate.check_layout(LAYOUT_VERSION) is None
    assert migrate.check_layout(0) is None  # known old layout: migrate, do not rebuild
    reason = migrate.check_layout(LAYOUT_VERSION + 1)
    assert reason is not None and "unknown store layout" in reason


def test_old_values_are_readable_before_migration(tmp_path: Path) -> None:
    _make_v0_store(tmp_path / "s", 5)
    s = _open(tmp_path / "s")
    try:
        assert s.layout == 0 and migrate.needs_migration(s)
        raw = s.get(b"k0003")
        assert raw is not None and decode(raw, b"k0003", "t") == {"i": 3}
        assert origin(raw) == (UNKNOWN, UNKNOWN, UNKNOWN)
    finally:
        s.close()


def test_chunked_migration_resumes_after_reopen(tmp_path: Path) -> None:
    _make_v0_store(tmp_path / "s", 25)
    s = _open(tmp_path / "s")
    assert migrate.step(s, chunk=10) is False
    assert s.get_meta(K_MIGRATE_CURSOR) == b"k0009\x00"
    # A record applied meanwhile is written in the new layout and must survive untouched.
    s.apply(batch(("k0020", '{"new":true}'), start=25), True, 1)
    s.close()

    s = _open(tmp_path / "s")  # as after a crash or restart: continue from the cursor
    try:
        assert s.layout == 0
        steps = 0
        while not migrate.step(s, chunk=10):
            steps += 1
        assert steps == 1
        assert s.layout == LAYOUT_VERSION and s.read_meta().layout == LAYOUT_VERSION
        assert s.get_meta(K_MIGRATE_CURSOR) is None
        for key, raw in s.scan(None, None, False):
            assert raw[0] == LAYOUT_VERSION and len(raw) > HEADER_SIZE
            expected = {"new": True} if key == b"k0020" else {"i": int(key[1:])}
            assert decode(raw, key, "t") == expected
        assert origin(s.get(b"k0020") or b"")[2] == 25
    finally:
        s.close()


def test_migrate_all(tmp_path: Path) -> None:
    _make_v0_store(tmp_path / "s", 7)
    s = _open(tmp_path / "s")
    try:
        migrate.migrate_all(s, chunk=3)
        assert s.read_meta().layout == LAYOUT_VERSION
        assert all(raw[0] == LAYOUT_VERSION for _, raw in s.scan(None, None, False))
    finally:
        s.close()
