"""What SharedStore.with_writer() hands its writer process: every setting arrives as given
(functions by import name, RocksDB options rebuilt), and what another process could not be
given is refused in the caller, with the reason."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from globalstore import ConfigurationError, RocksDBOptions, SharedStore, ValueCache
from globalstore.stores.handover import Handover
from globalstore.stores.writer_process import writer_spec


def upper(key: str, value: Any) -> Any:
    return str(value).upper()


def by_city(key: str, value: Any) -> list[str]:
    return [value["city"]]


def from_v1(value: Any) -> Any:
    return {"v": value}


def test_settings_arrive_as_given() -> None:
    settings: dict[str, Any] = {
        "transform": upper,
        "transform_version": 2,
        "indexes": {"city": by_city},
        "value_format": 2,
        "converters": {1: from_v1},
        "rocksdb": RocksDBOptions(block_cache_size=1 << 20, compression="zstd"),
        "value_cache": ValueCache(entries=500, max_bytes=1 << 20),
        "ttl": 60.0,
        "invalid_values": "quarantine",
        "poll_timeout": 0.5,
    }
    spec = writer_spec("t", "127.0.0.1:9", "s", {"client.id": "c"}, settings)  # type: ignore[arg-type]
    sent = Handover.decode(spec.encode())  # as the child reads it
    assert sent.path == str(Path("s").absolute()) and sent.kafka_config == {"client.id": "c"}
    assert sent.store_settings() == settings


@pytest.mark.parametrize(
    "setting",
    [
        {"transform": lambda key, value: value},
        {"indexes": {"n": lambda key, value: [value]}},
        {"converters": {1: lambda value: value}},
    ],
    ids=["transform", "index", "converter"],
)
def test_a_function_the_writer_cannot_import_is_refused(setting: dict[str, Any]) -> None:
    settings = {"value_format": 2, **setting}
    with pytest.raises(ConfigurationError, match="module-level function"):
        SharedStore.with_writer("t", "127.0.0.1:9", "s", **settings)


def test_a_wrong_setting_fails_in_the_caller() -> None:
    with pytest.raises(TypeError, match="tll"):
        SharedStore.with_writer("t", "127.0.0.1:9", "s", tll=5)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match=r"group\.id"):
        SharedStore.with_writer("t", "127.0.0.1:9", "s", {"group.id": "g"})


def test_a_function_from_another_file_than_the_parent_named_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for place, body in (("parent", "return value"), ("planted", "return 'planted'")):
        (tmp_path / place).mkdir()
        (tmp_path / place / "shape_of_it.py").write_text(f"def shape(key, value):\n    {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "parent"))
    from shape_of_it import shape  # type: ignore[import-not-found]  # noqa: PLC0415

    sent = Handover.decode(writer_spec("t", "127.0.0.1:9", "s", {}, {"transform": shape}).encode())
    # The child: the same name, found first in another place on its path.
    monkeypatch.delitem(sys.modules, "shape_of_it")
    monkeypatch.syspath_prepend(str(tmp_path / "planted"))
    refused = r"transform shape_of_it:shape comes from .*planted"
    with pytest.raises(ConfigurationError, match=refused):
        sent.store_settings()
