"""A store command whose options would drop an index or the time index, or rebuild the store
with another transform, refuses and leaves the store as it was; on a store a process holds
it answers read-only instead (nothing would be dropped). A command that only reads takes the
settings the store records instead, and refuses only options given that disagree."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from globalstore.cli import main
from globalstore.cli.discards import discards, recorded
from globalstore.config import OnInvalidValue, StoreConfig
from globalstore.shaping import quarantine
from globalstore.shaping.transform import meta_entries
from globalstore.storage import Storage
from globalstore.storage.meta import Meta
from tests.unit.prepared import prepared

HERE = "tests.unit.cli.test_discards"
WRITTEN_WITH = ["--index", f"by_courier={HERE}:by_courier", "--ttl", "60"]
WRITTEN_WITH += ["--transform", f"{HERE}:unchanged", "--transform-version", "2"]


def by_courier(key: str, value: Any) -> str:
    return str(value["courier"])


def unchanged(key: str, value: Any) -> Any:
    return value


def _config(path: Path, **settings: Any) -> StoreConfig:
    return StoreConfig("t", "f:1", path, **settings)


WRITER = {
    "indexes": {"by_courier": by_courier},
    "ttl": 60,
    "transform": unchanged,
    "transform_version": 2,
}


def _write_store(path: Path) -> Storage:
    """A store written with WRITER's index, ttl and transform, holding one key; open."""
    config = _config(path, **WRITER)
    storage = prepared(config, meta=meta_entries(config))
    fresh = int(time.time() * 1000) + 3_600_000  # not expired while the test runs
    storage.apply([(b"a", b'{"courier": "c-1"}', None, 0, 0, fresh)], {}, True, 1)
    return storage


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """A closed store (no process holds it) written with WRITER's settings."""
    path = tmp_path / "s"
    _write_store(path).close()
    return path


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """The same store, held open (locked) while the test runs."""
    path = tmp_path / "s"
    storage = _write_store(path)
    yield path
    storage.close()


def _meta(path: Path) -> Meta:
    storage = Storage(path, read_only=True)
    try:
        return storage.read_meta()
    finally:
        storage.close()


def _run(path: Path, *args: str, command: str = "restore") -> Any:
    # Port 1: nothing listens, so a command that went past the check could not restore.
    store = ["--topic", "t", "--path", str(path), "--bootstrap-servers", "127.0.0.1:1"]
    return CliRunner().invoke(main, [*command.split(), *store, "--timeout", "2", *args])


def test_the_settings_the_store_was_written_with_discard_nothing(written: Path) -> None:
    assert discards(_meta(written), _config(written, **WRITER)) == []
    more = _config(written, **{**WRITER, "ttl": 5, "indexes": {**WRITER["indexes"], "n": len}})
    assert discards(_meta(written), more) == []  # another ttl, a new index: nothing lost


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"indexes": {}}, "index 'by_courier' version 1 (not given)"),
        ({"index_versions": {"by_courier": 2}}, "version 1 (given as version 2)"),
        ({"ttl": None}, "the time index of its ttl (60 s; no --ttl given)"),
        ({"transform": None}, "written with transform version 2; no transform is given now"),
        ({"transform_version": 3}, "written with transform version 2, not 3"),
        ({"invalid_values": "quarantine"}, "invalid_values='store', not 'quarantine'"),
    ],
)
def test_each_loss_is_named(written: Path, changed: dict[str, Any], named: str) -> None:
    lost = discards(_meta(written), _config(written, **{**WRITER, **changed}))
    assert len(lost) == 1 and named in lost[0], lost


def test_a_command_without_the_store_settings_refuses_and_changes_nothing(
    written: Path,
) -> None:
    before = _meta(written)
    result = _run(written)
    assert result.exit_code == 2, result.output
    for named in ("'by_courier'", "ttl", "transform version 2", "--redefine"):
        assert named in result.output, result.output
    assert "Traceback" not in result.output
    after = _meta(written)
    assert (after.indexes, after.ttl_ms, after.transform_version) == (
        before.indexes, before.ttl_ms, before.transform_version
    )  # fmt: skip


def test_a_command_with_the_store_settings_goes_on_to_open_it(written: Path) -> None:
    result = _run(written, *WRITTEN_WITH)
    assert "would discard" not in result.output
    assert result.exit_code == 2 and "127.0.0.1:1" in result.output, result.output  # no broker


def test_redefine_lets_the_command_go_on(written: Path) -> None:
    result = _run(written, "--redefine")
    assert "would discard" not in result.output
    assert result.exit_code == 2 and "127.0.0.1:1" in result.output, result.output  # no broker


def test_a_damaged_store_is_left_to_the_rebuild_opening_it_makes(written: Path) -> None:
    (written / "db" / "CURRENT").write_bytes(b"not a manifest name\n")
    result = _run(written)
    assert "would discard" not in result.output
    assert result.exit_code == 2 and "127.0.0.1:1" in result.output, result.output  # no broker


def test_a_held_store_is_looked_into_read_only_whatever_the_options(held: Path) -> None:
    result = _run(held, command="count")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "1"


@pytest.mark.parametrize("command", ["count", "get a", "status", "quarantine", "scan"])
def test_a_reading_command_without_the_functions_answers_from_the_files(
    written: Path, command: str
) -> None:
    result = _run(written, command=command)
    assert result.exit_code == 0, result.output
    assert "whose functions no option gives; answering read-only" in result.stderr
    assert {"count": "1\n", "get a": '{"courier":"c-1"}\n'}.get(command, result.stdout) == (
        result.stdout
    )


@pytest.mark.parametrize(
    "conflicting", [["--invalid-values", "quarantine"], ["--transform-version", "3"]]
)
def test_a_reading_command_refuses_an_option_that_disagrees(
    written: Path, conflicting: list[str]
) -> None:
    given = [*WRITTEN_WITH, *conflicting] if conflicting[0] != "--invalid-values" else conflicting
    result = _run(written, *given, command="count")
    assert result.exit_code == 2 and "would discard" in result.output, result.output


def test_a_reading_command_takes_the_ttl_and_invalid_values_the_store_records(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s"
    config = _config(path, ttl=60, invalid_values="quarantine")
    prepared(config, meta=quarantine.meta_entries(config)).close()
    adopted = recorded(_config(path), frozenset())
    assert adopted is not None
    assert (adopted.ttl, adopted.invalid_values) == (60, OnInvalidValue.QUARANTINE)
    result = _run(path, command="count")  # it goes on to open the store: no broker here
    assert "would discard" not in result.output
    assert result.exit_code == 2 and "127.0.0.1:1" in result.output, result.output
