"""A copy's point lookup (read/copy.py) follows its storage when the database is opened
again: a rebuild at start wipes the store under the copy the store already serves from."""

from __future__ import annotations

from pathlib import Path

from globalstore.converters import ValueFormats
from globalstore.read.copy import Copy
from globalstore.storage import Storage
from tests.unit.store_fakes import batch


def test_a_lookup_after_a_wipe_reads_the_database_opened_again(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    storage.apply(batch(("a", "1")), {}, True, 1)
    copy = Copy(storage, ValueFormats(), "t")
    assert copy.lookup(b"a") is not None
    storage.wipe()  # as a rebuild at start does, the copy made already
    storage.initialise("t", None, 1)
    storage.apply(batch(("b", "2")), {}, True, 1)
    assert copy.lookup(b"a") is None and copy.lookup(b"b") is not None
    storage.close()
