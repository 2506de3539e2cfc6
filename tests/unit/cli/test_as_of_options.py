"""The CLI as of a time, without a broker: --as-of is parsed as RFC 3339 with a zone or
epoch seconds (anything else is a usage error naming both forms), a store kept with
history is refused when --history is left out of a command that would drop it, and a
command that only reads takes the history the store records, and scan reads an index as
of a time."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from globalstore.cli import main
from globalstore.cli.discards import discards, recorded
from globalstore.cli.store import _Time
from globalstore.config import StoreConfig
from globalstore.storage import Storage
from tests.unit.prepared import prepared


def test_as_of_takes_rfc_3339_with_a_zone_or_epoch_seconds() -> None:
    parse = _Time().convert
    assert parse("1700000000.5", None, None) == 1700000000.5
    assert parse("2026-11-29T09:00:00Z", None, None) == dt.datetime(2026, 11, 29, 9, tzinfo=dt.UTC)
    for bad in ("2026-11-29T09:00:00", "noon", "inf", "1E100"):
        with pytest.raises(click.BadParameter, match="time"):
            parse(bad, None, None)


def test_a_store_with_history_is_never_dropped_by_a_forgotten_option(tmp_path: Path) -> None:
    path = tmp_path / "s"
    storage = Storage(path)
    storage.initialise("t", None, 1)
    storage.load(storage.read_meta())
    storage.history.define(3_600_000, 1)
    meta = storage.read_meta()
    storage.close()
    plain = StoreConfig("t", "f:1", path)
    assert discards(meta, plain) == ["its history (3600 s; no --history given)"]
    assert discards(meta, StoreConfig("t", "f:1", path, history=60)) == []
    taken = recorded(plain, frozenset())
    assert taken is not None and taken.history == 3600.0
    bare = Storage(tmp_path / "bare")  # a store written without history
    bare.initialise("t", None, 1)
    turned_on = discards(bare.read_meta(), StoreConfig("t", "f:1", bare.path, history=60))
    bare.close()
    assert len(turned_on) == 1 and "history was turned on" in turned_on[0]


def test_scan_reads_an_index_as_of_a_time_from_the_files(tmp_path: Path) -> None:
    path = tmp_path / "s"
    storage = prepared(StoreConfig("t", "f:1", path, indexes={"by_courier": "courier"}))
    storage.history.define(10**13, 0)
    storage.apply([(b"a", b'{"courier":"c-1"}', None, 0, 0, 1_000)], {}, True, 1)
    storage.apply([(b"a", b'{"courier":"c-2"}', None, 0, 1, 2_000)], {}, True, 1)
    try:  # held open, as by a running application: the CLI answers from the files
        args = ["scan", "--index", "by_courier", "--topic", "t", "--path", str(path)]
        then = CliRunner().invoke(main, [*args, "--value", "c-1", "--as-of", "1.5"])
        now = CliRunner().invoke(main, [*args, "--value", "c-1"])
    finally:
        storage.close()
    assert then.exit_code == 0, then.output
    assert then.stdout == '{"key":"a","value":{"courier":"c-1"}}\n' and now.stdout == ""
