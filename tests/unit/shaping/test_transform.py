"""The transform on ingest without a broker: what it is given and what is stored in its place
(real RocksDB), its failures, and when a store must be rebuilt for it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore.codec import HEADER_SIZE, decode, format_headers, origin
from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError, InvalidValue
from globalstore.follow.consumer_source import ConsumerSource
from globalstore.follow.plan import rebuild_reason
from globalstore.follow.topic import Marks, TopicInfo
from globalstore.shaping import transform
from globalstore.snapshots.manifest import Manifest
from globalstore.storage import Record, Storage
from globalstore.storage.meta import Meta
from tests.unit.store_fakes import LikeTheCLoop, Msg, batch, messages

TOPIC = "t"


def keep_even(key: str, value: Any) -> Any:
    """Keeps the keys whose value has an even `n`, projected to two fields."""
    if value["n"] % 2:
        return None
    return {"n": value["n"], "tag": value["tag"]}


def _config(path: Path, fn: Any = keep_even, **settings: Any) -> StoreConfig:
    return StoreConfig(TOPIC, "fake:1", path, transform=fn, **settings)


def _value(n: int, tag: str = "x") -> str:
    return orjson.dumps({"n": n, "tag": tag, "pad": "p" * 20}).decode()


class _Batches:
    """A consumer whose consume() returns the next of `batches`."""

    def __init__(self, *batches: list[Msg]) -> None:
        self.batches = list(batches)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        return self.batches.pop(0) if self.batches else []


def _stored(storage: Storage) -> dict[str, Any]:
    return {k.decode(): decode(raw, k, TOPIC) for k, raw in storage.scan(None, None, False)}


@pytest.fixture
def storage(tmp_path: Path) -> Any:
    s = Storage(tmp_path / "s")
    s.initialise(TOPIC, None, 1, transform.meta_entries(_config(tmp_path)))
    s.load(s.read_meta())
    yield s
    s.close()


def test_the_store_holds_what_the_transform_returns(storage: Storage, tmp_path: Path) -> None:
    first = messages(("a", _value(2)), ("b", _value(3)), ("c", _value(4, "y")), fmt=1)
    # Then: a kept key that the transform now drops, a dropped key now kept, a tombstone.
    later = messages(("a", _value(5)), ("b", _value(6)), ("c", None), ("d", _value(8)), start=3)
    source = ConsumerSource(_Batches(first, later), _config(tmp_path), True, list_keys=True)
    done = source.apply(storage, 1)
    applied = done.applied
    assert _stored(storage) == {"a": {"n": 2, "tag": "x"}, "c": {"n": 4, "tag": "y"}}
    assert applied.present == {b"a": True, b"b": False, b"c": True}
    assert storage.state.count == 2 and done.transform_failures == 0
    raw = storage.get(b"c")
    assert raw is not None and origin(raw) == (1_000, 0, 2)  # the record's own origin

    applied = source.apply(storage, 2).applied
    assert _stored(storage) == {"b": {"n": 6, "tag": "x"}, "d": {"n": 8, "tag": "x"}}
    assert applied.present == {b"a": False, b"b": True, b"c": False, b"d": True}
    assert storage.state.count == 2 and storage.state.positions == {0: 7}


def test_a_tombstone_deletes_without_asking_the_transform(storage: Storage) -> None:
    asked: list[str] = []

    def keep_all(key: str, value: Any) -> Any:
        asked.append(key)
        return value

    transformer = transform.Transformer(keep_all, _config(Path("s")).value_formats(), TOPIC)
    records = list(transformer.records(batch(("a", "1"), ("a", None))))
    assert asked == ["a"] and records[1] == (b"a", None, None, 0, 1, 1_000)


def test_the_transform_sees_the_current_format_and_its_output_declares_it() -> None:
    config = _config(
        Path("s"), lambda key, value: {"seen": value}, value_format=2,
        converters={1: lambda v: {"v2": v}},
    )  # fmt: skip
    transformer = transform.transformer(config)
    assert transformer is not None
    records = batch(("a", "1"), fmt=1) + batch(("b", "2"), fmt=2, start=1)
    assert list(transformer.records(records)) == [
        (b"a", b'{"seen":{"v2":1}}', format_headers(2), 0, 0, 1_000),
        (b"b", b'{"seen":2}', format_headers(2), 0, 1, 1_000),
    ]


def test_values_the_store_cannot_read_are_stored_as_they_came(
    storage: Storage, tmp_path: Path
) -> None:
    unreadable = [
        Msg(b"json", b"{not json", 0, 0),
        Msg(b"newer", _value(2).encode(), 0, 1, fmt=9),
        Msg(b"\xff", _value(2).encode(), 0, 2),  # not UTF-8: skipped by storage, reported
    ]
    source = ConsumerSource(_Batches(unreadable), _config(tmp_path), True, list_keys=False)
    done = source.apply(storage, 1)
    assert done.transform_failures == 0 and done.applied.skipped == [(0, 2, b"\xff")]
    with pytest.raises(InvalidValue, match="not valid JSON"):
        decode(storage.get(b"json") or b"", b"json", TOPIC)
    with pytest.raises(InvalidValue, match="unknown value format"):
        decode(storage.get(b"newer") or b"", b"newer", TOPIC)


def test_a_transform_that_raises_keeps_the_key_as_it_was(
    storage: Storage, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def picky(key: str, value: Any) -> Any:
        if value["tag"] == "bad":
            raise ValueError(f"no {key}")
        if value["tag"] == "set":
            return {1, 2}  # not JSON: a failure too
        return value["n"]

    first = messages(("a", _value(1)), ("b", _value(2, "bad")), p=1)
    later = messages(("a", _value(3, "bad")), ("c", _value(4, "set")), ("d", _value(5)), p=1,
                     start=2)  # fmt: skip
    source = ConsumerSource(_Batches(first, later), _config(tmp_path, picky), True, False)
    with caplog.at_level(logging.WARNING, logger="globalstore"):
        assert source.apply(storage, 1).transform_failures == 1
        assert source.apply(storage, 2).transform_failures == 2
    # a keeps its first value, b and c were never stored, d is; every offset is applied.
    assert _stored(storage) == {"a": 1, "d": 5}
    assert storage.state.positions == {1: 5} and storage.state.count == 2
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3
    assert "key 'b' of t partition 1 offset 1 (ValueError: no b)" in logged[0]
    assert "key 'a' of t partition 1 offset 2" in logged[1]
    assert "key 'c' of t partition 1 offset 3 (TypeError" in logged[2]


def test_a_batch_of_failures_logs_ten_then_how_many_more(
    storage: Storage, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(key: str, value: Any) -> Any:
        raise RuntimeError("boom")

    many = messages(*((f"k{i}", _value(i)) for i in range(25)))
    source = ConsumerSource(_Batches(many), _config(tmp_path, boom), False, False)
    with caplog.at_level(logging.WARNING, logger="globalstore"):
        assert source.apply(storage, 1).transform_failures == 25
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 11 and logged[-1] == "transform raised on 15 more records of t"
    assert _stored(storage) == {} and storage.state.positions == {0: 25}


INFO = TopicInfo((0,), "id-1", "compact", None)
MARKS = {0: Marks(0, 10, 10)}


def _reason(meta: Meta, config: StoreConfig) -> str | None:
    rebuild = rebuild_reason(meta, False, INFO, MARKS, config)
    return None if rebuild is None else rebuild.reason


def test_a_store_is_rebuilt_unless_written_with_the_same_transform(tmp_path: Path) -> None:
    plain = StoreConfig(TOPIC, "fake:1", tmp_path)
    v1, v2 = _config(tmp_path), _config(tmp_path, transform_version=2)
    meta = Meta(layout=1, topic=TOPIC, offsets={0: 5})
    written_v1 = Meta(layout=1, topic=TOPIC, offsets={0: 5}, transform_version=1,
                      transform_format=1)  # fmt: skip
    assert _reason(meta, plain) is None and _reason(written_v1, v1) is None
    assert _reason(meta, v1) == (
        "store was written without a transform; transform version 1 is given now"
    )
    assert _reason(written_v1, plain) == (
        "store was written with transform version 1; no transform is given now"
    )
    assert _reason(written_v1, v2) == "store was written with transform version 1, not 2"
    v1_format2 = _config(tmp_path, value_format=2, converters={1: lambda v: v})
    assert _reason(written_v1, v1_format2) == (
        "store's transform was given values of format 1, not 2"
    )


def test_the_transform_version_is_initialised_with_the_store(tmp_path: Path) -> None:
    with_v3 = _config(tmp_path, transform_version=3, value_format=2, converters={1: id})
    for config, version in ((StoreConfig(TOPIC, "f:1", tmp_path), None), (with_v3, 3)):
        s = Storage(tmp_path / f"s{version}")
        s.initialise(TOPIC, None, 1, transform.meta_entries(config))
        meta = s.read_meta()
        s.close()
        assert (meta.transform_version, meta.transform_format, meta.layout) == (
            version, None if version is None else 2, 1,
        )  # fmt: skip
        assert _reason(meta, config) is None


def test_a_snapshot_manifest_carries_the_transform(tmp_path: Path) -> None:
    meta = Meta(layout=1, topic=TOPIC, offsets={0: 5}, transform_version=2, transform_format=1)
    manifest = Manifest.parse(Manifest.of([], meta).to_bytes())
    assert (manifest.transform_version, manifest.transform_format) == (2, 1)
    older = orjson.loads(manifest.to_bytes())
    del older["transform_version"], older["transform_format"]
    parsed = Manifest.parse(orjson.dumps(older))
    assert (parsed.transform_version, parsed.transform_format) == (None, None)
    assert parsed.offsets == {0: 5}


def test_both_loops_write_the_same_transformed_bytes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def shaped(key: str, value: Any) -> Any:
        if value["tag"] == "bad":
            raise ValueError(key)
        return keep_even(key, value)

    records: list[Record] = [
        *batch(("a", _value(2)), ("b", _value(3)), ("a", _value(4, "bad")), ("c", _value(6))),
        *batch(("d", _value(8)), ("c", None), ("e", "{not json"), ("\xff", _value(2)), p=1),
        *batch(("f", _value(10)), ("g", _value(12)), p=2, fmt=2),  # unreadable here: kept
        *batch(("b", _value(14)), ("d", _value(15, "bad")), p=2, start=2, fmt=1),
    ]
    records[7] = (b"\xff", *records[7][1:])  # a key that is not UTF-8
    written = {}
    for name, native in (("python", False), ("c", True)):
        config = _config(tmp_path / name, shaped)
        storage = Storage(config.path)
        storage.initialise(TOPIC, None, 1, transform.meta_entries(config))
        storage.load(storage.read_meta())
        shaper = transform.transformer(config)
        assert shaper is not None
        with caplog.at_level(logging.WARNING, logger="globalstore"):
            if native:
                shaped_batch = shaper.native(LikeTheCLoop(records))
                applied = storage.apply_native(shaped_batch, 0.0, 1)
                failures = shaped_batch.failures
            else:
                shaped_records = shaper.records(records)
                applied = storage.apply(shaped_records, {}, False, 1, list_keys=False)
                failures = shaped_records.failures
        written[name] = (dict(storage.scan(None, None, False)), storage.read_meta().offsets)
        assert applied.skipped == [(1, 3, b"\xff")] and failures == 2, name
        storage.close()
    assert written["c"] == written["python"]
    values, offsets = written["c"]
    assert offsets == {0: 4, 1: 4, 2: 4}
    assert sorted(values) == [b"a", b"b", b"d", b"e", b"f", b"g"]
    assert orjson.loads(values[b"a"][HEADER_SIZE:]) == {"n": 2, "tag": "x"}  # kept as it was
    assert values[b"f"][1] == 2 and values[b"e"].endswith(b"{not json")  # as they came
    failed = [m for m in caplog.messages if m.startswith("transform raised on key")]
    assert len(failed) == 4 and "key 'd' of t partition 2 offset 3" in failed[-1]


def test_the_transform_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="transform is not callable"):
        StoreConfig(TOPIC, "f:1", Path("s"), transform="module:fn")  # type: ignore[arg-type]
    for bad in (0, "2", True):
        with pytest.raises(ConfigurationError, match="transform_version must be an int >= 1"):
            StoreConfig(TOPIC, "f:1", Path("s"), transform_version=bad)  # type: ignore[arg-type]
