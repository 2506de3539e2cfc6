"""The walk down a key's versions in C (_history_walk.c) against the same walk in Python
(versions.walk), on real RocksDB: the same answer for every key and time, given the key's
current value or none, and the iterator left at the same place, with tombstones, timestamps
that go backwards, keys that moved partition, a key with more versions in a partition than
the walk steps over before it seeks, and a key with one timestamp in two partitions."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import rocksdict

from globalstore.storage import versions
from globalstore.storage.versions import PREFIX, walk
from tests.unit.read.test_as_of import _rec, _written

pytestmark = pytest.mark.skipif(
    versions._history_walk is None, reason="built without the C extensions: nothing to compare"
)


def _heads(keys: set[bytes]) -> list[tuple[bytes, bytes]]:
    return [(k, PREFIX + k.replace(b"\x00", b"\x00\xff") + b"\x00\x00") for k in sorted(keys)]


@pytest.mark.parametrize("moves", [False, True], ids=["fixed-partitions", "keys-move"])
def test_the_c_walk_answers_and_moves_as_the_python_walk(tmp_path: Path, moves: bool) -> None:
    rng = random.Random(46)
    storage, records = _written(tmp_path / "s", rng, 400, moves)
    # One key with 40 versions in a partition: past versions._STEPS, the walk seeks.
    storage.apply([_rec("long", {"n": i}, 2_000 + (i % 7) * 3, 1, 1_000 + i) for i in range(40)],
                  {}, True, 1)  # fmt: skip
    # A key in two partitions at one timestamp: the greater partition answers.
    storage.apply([_rec("tie", {"p": 0}, 2_500, 0, 3_000), _rec("tie", {"p": 1}, 2_500, 1, 3_000)],
                  {}, True, 1)  # fmt: skip
    assert storage.index is not None
    heads = _heads({r[0] for r in records if r[0] is not None} | {b"long", b"none", b"tie"})
    c_walk = versions._history_walk.answer
    answered = set()
    for t in [rng.randrange(900, 3_200) for _ in range(40)] + [0, 10**12]:
        for key, head in heads:
            # The key's current value, and none (a walk of the entries alone).
            for current in {storage.get(key), None}:
                py_it, c_it = storage.index.iterator(), storage.index.iterator()
                py_it.seek(head)
                c_it.seek(head)
                got = c_walk(c_it, head, t, current)
                assert got == walk(py_it, head, t, current)
                assert c_it.valid() == py_it.valid()
                assert not py_it.valid() or c_it.key() == py_it.key()
                answered.add((got is None, got is not None and got == current))
    # Not vacuous: absent, the current value and an older version all answered.
    assert answered == {(True, False), (False, True), (False, False)}
    storage.close()


def test_a_version_too_short_for_its_timestamp_is_an_error_not_a_guess(tmp_path: Path) -> None:
    db = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    head = _heads({b"bad"})[0][1]
    db.put(head + bytes(12), b"\x01\x02\x03")
    it = db.iter()
    it.seek(head)
    with pytest.raises(ValueError, match="too short"):
        versions._history_walk.answer(it, head, 10**12, None)
    del it
    db.close()
