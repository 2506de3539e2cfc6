"""Value formats with user converters: checked chains, lazy reads, the eager resumable pass, a
converter that raises, and a store converted further than its reader understands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from globalstore.codec import LAYOUT_VERSION, origin, stored_format
from globalstore.converters import ValueFormats, decoder
from globalstore.errors import ConfigurationError, ConversionFailed, InvalidValue
from globalstore.shaping import migrate
from globalstore.storage import Storage
from globalstore.storage.meta import K_CONVERT_CURSOR
from tests.unit.store_fakes import batch
from tests.value_formats import CONVERTERS, v1_to_v2, v2_to_v3, v3

FORMATS = ValueFormats(3, CONVERTERS)


def make_mixed_store(path: Path, n: int) -> Storage:
    """Keys k0000.. in format 1, then their even ones rewritten in format 2 and every fifth
    in format 3, as records of a topic that changed format twice: applied like any batch."""
    s = Storage(path)
    s.initialise("t", None, 0)
    s.apply(batch(*((f"k{i:04d}", f'{{"i":{i}}}') for i in range(n)), fmt=1), {}, True, 1)
    evens = [(f"k{i:04d}", f'{{"id":{i},"v":2}}') for i in range(0, n, 2)]
    s.apply(batch(*evens, start=n, fmt=2), {}, True, 2)
    fifths = [(f"k{i:04d}", f'{{"id":{i},"v":3,"name":"n{i}"}}') for i in range(0, n, 5)]
    s.apply(batch(*fifths, start=2 * n, fmt=3), {}, True, 3)
    s.load(s.read_meta())
    return s


@pytest.mark.parametrize(
    ("current", "converters", "message"),
    [
        (3, {1: v1_to_v2}, "missing the converter from format 2"),
        (2, {2: v2_to_v3}, "cannot lead to value_format 2"),
        (2, {1: "not a function"}, "is not callable"),
        (0, {}, "between 1 and 255"),
    ],
)
def test_a_chain_with_a_gap_is_refused(current: int, converters: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ValueFormats(current, converters)


def test_every_format_is_read_as_the_current_one(tmp_path: Path) -> None:
    s = make_mixed_store(tmp_path / "s", 20)
    decode = decoder(FORMATS)
    try:
        for key, raw in s.scan(None, None, False):
            i = int(key[1:])
            if i == 13:
                continue
            assert decode(raw, key, "t") == v3(i), key
        assert {stored_format(raw) for _, raw in s.scan(None, None, False)} == {1, 2, 3}
    finally:
        s.close()


def test_a_failing_converter_names_the_record_and_its_format(tmp_path: Path) -> None:
    s = make_mixed_store(tmp_path / "s", 20)
    try:
        raw = s.get(b"k0013")
        assert raw is not None
        with pytest.raises(ConversionFailed) as failed:
            decoder(FORMATS)(raw, b"k0013", "t")
        assert (failed.value.partition, failed.value.offset, failed.value.version) == (0, 13, 1)
        assert "13 has no format 3 form" in str(failed.value) and "k0013" in str(failed.value)
    finally:
        s.close()


def test_a_format_without_a_converter_is_refused_not_misread(tmp_path: Path) -> None:
    s = make_mixed_store(tmp_path / "s", 5)
    try:
        raw = s.get(b"k0001")  # format 1
        assert raw is not None
        with pytest.raises(InvalidValue, match="value format 1 is not readable"):
            decoder(ValueFormats(3, {2: v2_to_v3}))(raw, b"k0001", "t")
    finally:
        s.close()


def test_the_eager_pass_converts_in_resumable_chunks_and_keeps_what_fails(tmp_path: Path) -> None:
    s = make_mixed_store(tmp_path / "s", 40)
    before = {k: origin(raw) for k, raw in s.scan(None, None, False)}
    migration = migrate.Migration(s, FORMATS, "t")
    migration.begin()
    # Recorded before the first converted value is written: an older reader must not open it.
    assert s.read_meta().value_format == 3 and s.get_meta(K_CONVERT_CURSOR) == b""
    assert migration.step(migrate.Limits(keys=10)) is False
    s.close()

    s = Storage(tmp_path / "s")  # as after kill -9: the cursor went with its chunk
    s.load(s.read_meta())
    try:
        assert s.get_meta(K_CONVERT_CURSOR) == b"k0009\x00"
        migration = migrate.Migration(s, FORMATS, "t")
        migration.begin()
        while not migration.step(migrate.Limits(keys=10)):
            pass
        assert migration.failures == 1  # k0013, kept as it was
        assert not s.read_meta().converting
        decode = decoder(FORMATS)
        for key, raw in s.scan(None, None, False):
            assert origin(raw) == before[key]  # timestamp and origin kept
            if key == b"k0013":
                assert stored_format(raw) == 1
            else:
                assert raw[:2] == bytes([LAYOUT_VERSION, 3]) and decode(raw, key, "t") == v3(
                    int(key[1:])
                )
    finally:
        s.close()


def test_a_store_converted_further_than_its_reader_is_unreadable(tmp_path: Path) -> None:
    s = make_mixed_store(tmp_path / "s", 5)
    try:
        migrate.Migration(s, FORMATS, "t").run()
        meta = s.read_meta()
        assert migrate.unreadable_reason(meta, FORMATS) is None
        older = ValueFormats(2, {1: v1_to_v2})
        reason = migrate.unreadable_reason(meta, older)
        assert reason is not None and "converted to value format 3" in reason
    finally:
        s.close()
