"""Settings: librdkafka passthrough, the consumer contract, RocksDB options."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import rocksdict
from confluent_kafka.admin import AdminClient

from globalstore import ConfigurationError, GlobalStore, RocksDBOptions, SharedStore, StoreConfig
from globalstore.aio import AsyncGlobalStore
from globalstore.config import OnOutOfRange, OnUnreadable, StoreSettings
from globalstore.storage import rocksdb_options


def _config(**kw: object) -> StoreConfig:
    return StoreConfig(topic="t", bootstrap_servers="h:1", path=Path("p"), **kw)  # type: ignore[arg-type]


def test_consumer_reads_committed_and_never_commits() -> None:
    conf = _config().consumer_config()
    assert conf["bootstrap.servers"] == "h:1"
    assert conf["enable.auto.commit"] is False
    assert conf["isolation.level"] == "read_committed"
    assert conf["enable.partition.eof"] is True
    assert conf["auto.offset.reset"] == "error"  # never a silent jump (OffsetsOutOfRange)
    assert conf["group.id"] != _config().consumer_config()["group.id"]  # throwaway per store


def test_kafka_config_passes_through_and_wins() -> None:
    config = _config(kafka_config={"security.protocol": "SSL", "fetch.wait.max.ms": 100})
    assert config.consumer_config()["security.protocol"] == "SSL"
    assert config.consumer_config()["fetch.wait.max.ms"] == 100
    admin = config.admin_config()
    assert admin["security.protocol"] == "SSL"
    assert "group.id" not in admin and "isolation.level" not in admin


def test_admin_client_gets_connection_settings_but_no_consumer_ones() -> None:
    config = _config(
        kafka_config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "ssl.ca.location": "/etc/ca.pem",
            "client.id": "app",
            "socket.timeout.ms": 1000,
            "session.timeout.ms": 10_000,
            "fetch.min.bytes": 10,
            "check.crcs": True,
        }
    )
    admin = config.admin_config()
    assert {k: admin[k] for k in ("security.protocol", "sasl.mechanism", "client.id")} == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "client.id": "app",
    }
    assert admin["ssl.ca.location"] == "/etc/ca.pem" and admin["socket.timeout.ms"] == 1000
    assert not {"session.timeout.ms", "fetch.min.bytes", "auto.offset.reset", "check.crcs"} & set(
        admin
    )  # auto.offset.reset is the store's own (protected) consumer setting


def test_admin_client_accepts_its_settings_without_warnings() -> None:
    # The control: a consumer-only property given straight to an AdminClient is warned
    # about, so the way warnings are collected here does see them.
    assert _configuration_warnings({"bootstrap.servers": "h:1", "fetch.min.bytes": 10})
    config = _config(kafka_config={"client.id": "app", "fetch.min.bytes": 10})
    assert _configuration_warnings(config.admin_config()) == []


def _configuration_warnings(settings: dict[str, object]) -> list[str]:
    """CONFWARN lines of a new AdminClient. librdkafka queues them while creating the client
    (nothing to wait for: no broker is contacted); the first poll hands them to the logger."""
    logged: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    logger = logging.getLogger(f"test-admin-config-{id(logged)}")
    logger.addHandler(Collect())
    admin = AdminClient({**settings, "logger": logger})
    admin.poll(0)
    return [line for line in logged if "CONFWARN" in line]


def test_config_is_frozen() -> None:
    config = _config()
    with pytest.raises(AttributeError):
        config.topic = "other"  # type: ignore[misc]


def test_rocksdb_options_build_a_raw_mode_database(tmp_path: Path) -> None:
    opts = rocksdb_options(RocksDBOptions(compression="zstd", bloom_bits_per_key=0))
    db = rocksdict.Rdict(str(tmp_path / "db"), opts)
    db[b"k"] = b"v"  # raw mode accepts and returns bytes, nothing pickled
    assert db[b"k"] == b"v"
    db.close()


def test_unknown_compression_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown compression"):
        rocksdb_options(RocksDBOptions(compression="brotli"))


def test_modes_accept_their_names_and_become_enums() -> None:
    config = _config(unreadable_store="refuse", out_of_range="stop")
    assert config.unreadable_store is OnUnreadable.REFUSE
    assert config.out_of_range is OnOutOfRange.STOP
    assert _config().out_of_range is OnOutOfRange.REBUILD
    assert config.out_of_range == "stop"  # still equal to the string users compare with


def test_an_unknown_mode_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigurationError, match="out_of_range must be 'rebuild' or 'stop'"):
        _config(out_of_range="ignore")


def test_the_path_is_a_path_however_it_is_given() -> None:
    assert StoreConfig("t", "h:1", "state/t").path == Path("state/t")  # type: ignore[arg-type]


def test_the_store_takes_any_setting_by_name() -> None:
    store = GlobalStore("t", "h:1", "p", out_of_range="stop", restore_batch_size=7, rocksdb=None)
    assert store.config.out_of_range is OnOutOfRange.STOP
    assert store.config.restore_batch_size == 7
    assert store.config.rocksdb == RocksDBOptions()  # None means the default
    assert store.config.path == Path("p")


def test_named_settings_override_a_whole_config() -> None:
    store = GlobalStore(config=_config(follow_batch_size=5), path="elsewhere")
    assert store.config.follow_batch_size == 5
    assert store.config.path == Path("elsewhere") == store.path


def test_a_store_without_a_topic_or_with_an_unknown_setting_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="topic"):
        GlobalStore(bootstrap_servers="h:1", path="p")
    with pytest.raises(TypeError, match="restore_batch"):
        GlobalStore("t", "h:1", "p", restore_batch=7)


def test_the_typed_settings_are_the_configs_fields_past_the_first_four() -> None:
    """StoreSettings (what a type checker holds GlobalStore(..., **settings) to) names every
    field of StoreConfig a face takes by keyword, and nothing else."""
    fields = [f.name for f in dataclasses.fields(StoreConfig)]
    assert fields[:4] == ["topic", "bootstrap_servers", "path", "kafka_config"]
    assert list(StoreSettings.__annotations__) == fields[4:]


def test_a_path_that_is_a_file_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "orders").write_text("not a store")
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "orders")
    with pytest.raises(ConfigurationError, match=r"path .*orders is a file: it must name a dir"):
        store.start(timeout=1)


def test_a_misspelled_setting_names_the_store_and_the_near_setting(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"^GlobalStore\(\) .* 'tll' \(did you mean 'ttl'\?\)$"):
        GlobalStore("t", "b:1", tmp_path, tll=60)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^AsyncGlobalStore\(\) .* 'zzz'$"):  # nothing near
        AsyncGlobalStore("t", "b:1", tmp_path, zzz=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"SharedStore\.with_writer\(\) .*'indices'"):
        SharedStore.with_writer("t", "b:1", tmp_path, indices={})  # type: ignore[call-arg]


def test_named_settings_are_those_given_past_the_first_four(tmp_path: Path) -> None:
    config = StoreConfig("t", "b:1", tmp_path, {"client.id": "x"}, ttl=60, out_of_range="stop")
    assert config.named_settings() == {"ttl": 60, "out_of_range": "stop"}
    assert StoreConfig("t", "b:1", tmp_path, **config.named_settings()) == dataclasses.replace(
        config, kafka_config={}
    )


def test_where_the_follower_runs_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="follower must be 'thread' or 'process'"):
        GlobalStore("t", "b:1", tmp_path, follower="fork")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no listeners and no bootstrap_from"):
        GlobalStore("t", "b:1", tmp_path, follower="process", bootstrap_from=tmp_path / "p")
    with pytest.raises(ConfigurationError, match="transform"):  # it must be importable there
        GlobalStore("t", "b:1", tmp_path, follower="process", transform=lambda k, v: v)
