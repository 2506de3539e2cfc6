"""The C writer of index entries (_entries.c) puts and deletes what the Python loop it
replaces (keys._write_changes) does, call for call, over keys gaining, losing, keeping and
swapping index values, and counts the same change."""

from __future__ import annotations

import random

import pytest

from globalstore.storage import keys


def _calls(use_c: bool, rng_seed: int) -> tuple[list[tuple[object, ...]], int]:
    rng = random.Random(rng_seed)
    values = [b"a", b"b", b"c", b"", "é".encode()]
    stored: dict[bytes, bytes] = {}
    for n in range(40):
        old = frozenset(rng.sample(values, rng.randrange(4)))
        if old and rng.random() < 0.7:
            stored[keys.KEYS + keys._ID.pack(7) + f"k{n}".encode()] = keys.encode_values(old)
    batch_keys = [f"k{n}".encode() for n in range(40)]
    news: list[keys.KeyIndexValues] = [
        frozenset(rng.sample(values, rng.randrange(4))) for _ in batch_keys
    ]
    # One value is given as its bytes (the common case), as the C reader gives it.
    news = [next(iter(n)) if len(n) == 1 and rng.random() < 0.7 else n for n in news]
    calls: list[tuple[object, ...]] = []

    def put(key: bytes, value: bytes, handle: object) -> None:
        calls.append(("put", key, value, handle))

    def delete(key: bytes, handle: object) -> None:
        calls.append(("delete", key, handle))

    def get_many(wanted: list[bytes]) -> list[bytes | None]:
        return [stored.get(k) for k in wanted]

    saved = keys._entries
    if not use_c:
        keys._entries = None
    try:
        delta = keys.write_changes(7, batch_keys, news, get_many, put, delete, "cf")
    finally:
        keys._entries = saved
    return calls, delta


@pytest.mark.parametrize("seed", range(5))
def test_the_c_writer_makes_the_calls_of_the_python_loop(seed: int) -> None:
    assert keys._entries is not None  # built here
    c_calls, c_delta = _calls(True, seed)
    py_calls, py_delta = _calls(False, seed)
    assert c_calls == py_calls and c_delta == py_delta
    assert any(call[0] == "delete" for call in c_calls) and len(c_calls) > 20


def _entries_calls(use_c: bool, rng_seed: int) -> tuple[list[tuple[object, ...]], int]:
    """write_entries over keys whose old values are given: none, one as bytes or a set."""
    rng = random.Random(rng_seed)
    values = [b"a", b"b", b"c", b"", "é".encode()]

    def one_or_set() -> keys.KeyIndexValues:
        chosen = frozenset(rng.sample(values, rng.randrange(4)))
        return next(iter(chosen)) if len(chosen) == 1 and rng.random() < 0.7 else chosen

    batch_keys = [f"k{n}".encode() for n in range(60)]
    news = [one_or_set() for _ in batch_keys]
    olds: list[keys.KeyIndexValues | None] = [
        None if rng.random() < 0.3 else news[i] if rng.random() < 0.2 else one_or_set()
        for i in range(len(batch_keys))
    ]
    calls: list[tuple[object, ...]] = []

    def put(key: bytes, value: bytes) -> None:
        calls.append(("put", key, value))

    def delete(key: bytes) -> None:
        calls.append(("delete", key))

    saved = keys._entries
    if not use_c:
        keys._entries = None
    try:
        delta = keys.write_entries(7, batch_keys, news, olds, put, delete)
    finally:
        keys._entries = saved
    return calls, delta


@pytest.mark.parametrize("seed", range(5))
def test_the_c_writer_without_reverse_entries_makes_the_calls_of_the_python_loop(
    seed: int,
) -> None:
    c_calls, c_delta = _entries_calls(True, seed)
    py_calls, py_delta = _entries_calls(False, seed)
    assert c_calls == py_calls and c_delta == py_delta
    assert any(call[0] == "delete" for call in c_calls) and len(c_calls) > 20
    assert not any(call[1].startswith(keys.KEYS) for call in c_calls)  # no reverse entry
