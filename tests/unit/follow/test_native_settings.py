"""What the C loop's consumer is given: the store consumer's settings as strings, without the
Python-only ones (its statistics kept: the C loop hands them to the store thread), and
nothing at all when one of them is a Python callable."""

from __future__ import annotations

from pathlib import Path

from globalstore import StoreConfig
from globalstore.follow.native import native_settings


def test_settings_become_librdkafka_strings() -> None:
    conf = {"bootstrap.servers": "h:1", "enable.partition.eof": True, "fetch.wait.max.ms": 10}
    assert native_settings(conf) == {
        "bootstrap.servers": "h:1",
        "enable.partition.eof": "true",
        "fetch.wait.max.ms": "10",
    }


def test_the_store_threads_own_callbacks_stay_behind_its_statistics_go() -> None:
    config = StoreConfig(topic="t", bootstrap_servers="h:1", path=Path("s"))
    conf = {**config.consumer_config(), "stats_cb": print, "error_cb": print, "logger": object()}
    settings = native_settings(conf)
    assert settings is not None
    assert not {"stats_cb", "error_cb", "logger"} & settings.keys()
    assert settings["statistics.interval.ms"] == str(
        config.consumer_config()["statistics.interval.ms"]
    )
    assert settings["isolation.level"] == "read_committed"
    assert settings["auto.offset.reset"] == "error"


def test_a_callable_setting_leaves_the_restore_to_the_python_loop() -> None:
    assert native_settings({"bootstrap.servers": "h:1", "oauth_cb": lambda _: ("t", 0)}) is None
