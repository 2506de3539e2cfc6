"""Layout 0 (bare JSON) -> 1 (header + JSON): readable at once, converted in resumable chunks,
and marked so that a version that cannot read the new layout never opens it as the old one."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from globalstore.codec import HEADER_SIZE, LAYOUT_VERSION, UNKNOWN, decode, origin
from globalstore.converters import ValueFormats
from globalstore.shaping import migrate
from globalstore.storage import Storage
from globalstore.storage.meta import K_LAYOUT, K_MIGRATE_CURSOR, K_MIGRATE_FROM, Meta, offset_key
from tests.unit.store_fakes import batch

PLAIN = ValueFormats()


def make_v0_store(path: Path, n: int, topic: str | None = None) -> None:
    """A store as the layout-0 release left it, built through the storage layer."""
    s = Storage(path)
    values = [(f"k{i:04d}".encode(), orjson.dumps({"i": i})) for i in range(n)]
    meta = {K_LAYOUT: b"0", offset_key(0): n.to_bytes(8, "big")}
    if topic is not None:
        meta[b"topic"] = topic.encode()
    s.write_values(values, meta)
    s.close()


def _open(path: Path) -> Storage:
    s = Storage(path)
    s.load(s.read_meta())
    return s


def _begun(s: Storage) -> migrate.Migration:
    migration = migrate.Migration(s, PLAIN, "t")
    migration.begin()
    return migration


def test_layout_checks() -> None:
    assert migrate.unreadable_reason(_open_meta(1, None), PLAIN) is None
    assert migrate.unreadable_reason(_open_meta(0, None), PLAIN) is None  # migrate, not rebuild
    assert migrate.unreadable_reason(_open_meta(1, 0), PLAIN) is None
    reason = migrate.unreadable_reason(_open_meta(LAYOUT_VERSION + 1, None), PLAIN)
    assert reason is not None and "unknown store layout" in reason


def _open_meta(layout: int, migrate_from: int | None) -> Meta:
    return Meta(layout=layout, migrate_from=migrate_from)


def test_old_values_are_readable_before_migration(tmp_path: Path) -> None:
    make_v0_store(tmp_path / "s", 5)
    s = _open(tmp_path / "s")
    try:
        assert s.state.layout == 0
        raw = s.get(b"k0003")
        assert raw is not None and decode(raw, b"k0003", "t") == {"i": 3}
        assert origin(raw) == (UNKNOWN, UNKNOWN, UNKNOWN)
    finally:
        s.close()


def test_the_new_layout_is_recorded_before_any_value_is_written_in_it(tmp_path: Path) -> None:
    make_v0_store(tmp_path / "s", 5)
    s = _open(tmp_path / "s")
    try:
        migration = _begun(s)
        meta = s.read_meta()
        assert (meta.layout, meta.migrate_from) == (LAYOUT_VERSION, 0)
        assert all(raw[:1] == b"{" for _, raw in s.scan(None, None, False))  # none written yet
        assert migration.pending and migration.describe == "layout 0 -> 1"
    finally:
        s.close()


def test_chunked_migration_resumes_after_reopen(tmp_path: Path) -> None:
    make_v0_store(tmp_path / "s", 25)
    s = _open(tmp_path / "s")
    migration = _begun(s)
    assert migration.step(migrate.Limits(keys=10)) is False
    assert s.get_meta(K_MIGRATE_CURSOR) == b"k0009\x00"
    # A record applied meanwhile is written in the new layout and must survive untouched.
    s.apply(batch(("k0020", '{"new":true}'), start=25), {}, True, 1)
    s.close()

    s = _open(tmp_path / "s")  # as after a crash or restart: continue from the cursor
    try:
        assert (s.state.layout, s.state.migrate_from) == (LAYOUT_VERSION, 0)
        migration = _begun(s)
        steps = 0
        while not migration.step(migrate.Limits(keys=10)):
            steps += 1
        assert steps == 1
        meta = s.read_meta()
        assert (meta.layout, meta.migrate_from, s.state.migrate_from) == (
            LAYOUT_VERSION,
            None,
            None,
        )
        assert s.get_meta(K_MIGRATE_CURSOR) is None and s.get_meta(K_MIGRATE_FROM) is None
        for key, raw in s.scan(None, None, False):
            assert raw[0] == LAYOUT_VERSION and len(raw) > HEADER_SIZE
            expected = {"new": True} if key == b"k0020" else {"i": int(key[1:])}
            assert decode(raw, key, "t") == expected
        assert origin(s.get(b"k0020") or b"")[2] == 25
    finally:
        s.close()


def test_a_step_is_bounded_by_time_as_well_as_by_count(tmp_path: Path) -> None:
    make_v0_store(tmp_path / "s", 50)
    s = _open(tmp_path / "s")
    try:
        migration = _begun(s)
        # A zero time budget handles one value per step, whatever the count allows.
        assert migration.step(migrate.Limits(keys=1_000, seconds=0)) is False
        assert migration.converted == 1 and s.get_meta(K_MIGRATE_CURSOR) == b"k0000\x00"
    finally:
        s.close()


@pytest.mark.parametrize("keys", [3, 7, 1_000])
def test_run_converts_everything(tmp_path: Path, keys: int) -> None:
    make_v0_store(tmp_path / "s", 7)
    s = _open(tmp_path / "s")
    try:
        migration = migrate.Migration(s, PLAIN, "t")
        migration.run(migrate.Limits(keys=keys))
        assert migration.converted == 7 and not migration.pending
        assert s.read_meta().layout == LAYOUT_VERSION and s.read_meta().migrate_from is None
        assert all(raw[0] == LAYOUT_VERSION for _, raw in s.scan(None, None, False))
    finally:
        s.close()
