"""`--ttl SECONDS` without a broker: the store directory is held (as by a running
application), so the commands answer read-only from its files, leaving out what the
writer's ttl expired; a ttl that is not a positive number is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from globalstore.cli import main
from globalstore.config import StoreConfig
from tests.unit.cli.test_index_options import _keys
from tests.unit.prepared import prepared
from tests.unit.shaping.test_ttl import NOW, OLD


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """A store with a one-minute ttl holding an expired key and a fresh one, held open."""
    path = tmp_path / "s"
    storage = prepared(StoreConfig("t", "f:1", path, ttl=60))
    records = [
        (b"old", b'{"n": 1}', None, 0, 0, OLD),
        (b"new", b'{"n": 2}', None, 0, 1, NOW),
    ]
    storage.apply(records, {}, True, 1)
    yield path
    storage.close()


def _run(path: Path, *args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--topic", "t", "--path", str(path), "--ttl", "60"])


def test_the_commands_leave_expired_keys_out(held: Path) -> None:
    scanned = _run(held, "scan")
    assert scanned.exit_code == 0, scanned.output
    assert _keys(scanned.output) == ["new"]
    counted = _run(held, "count")
    assert counted.exit_code == 0 and counted.output.strip().endswith("1"), counted.output
    missing = _run(held, "get", "old")
    assert missing.exit_code != 0 and "new" not in missing.output
    status = _run(held, "status", "--offline")
    assert "60 s, time index ready (2 keys), 0 purged" in status.output, status.output


@pytest.mark.parametrize("bad", ["0", "-5", "soon"])
def test_a_ttl_that_is_not_a_positive_number_is_refused(tmp_path: Path, bad: str) -> None:
    out = CliRunner().invoke(main, ["count", "--topic", "t", "--path", str(tmp_path), "--ttl", bad])
    assert out.exit_code == 2 and "--ttl" in out.output, out.output
