"""`--index NAME=PKG.MODULE:FUNCTION`, `--index-version` and `scan --index NAME --value V`
without a broker: the store directory is held (as by a running application), so the
commands answer read-only from its files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from globalstore.cli import main
from globalstore.config import StoreConfig
from tests.unit.prepared import prepared
from tests.unit.store_fakes import batch

FN = "tests.unit.cli.test_index_options:by_courier"


def by_courier(key: str, value: Any) -> str:
    return str(value["courier"])


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """A store with index by_courier, held open (locked) while the test runs."""
    path = tmp_path / "s"
    storage = prepared(StoreConfig("t", "f:1", path, indexes={"by_courier": by_courier}))
    couriers = {"a": "c-1", "b": "c-2", "c": "c-1", "d": "c-10"}
    records = [(k, orjson.dumps({"courier": c}).decode()) for k, c in couriers.items()]
    storage.apply(batch(*records), {}, True, 1)
    yield path
    storage.close()


def _run(path: Path, *args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--topic", "t", "--path", str(path)])


def _keys(output: str) -> list[str]:
    return [orjson.loads(line)["key"] for line in output.splitlines() if line.startswith("{")]


def test_scan_finds_by_index_value_and_ranges_over_index_values(held: Path) -> None:
    found = _run(held, "scan", "--index", f"by_courier={FN}", "--value", "c-1")
    assert found.exit_code == 0, found.output
    assert _keys(found.output) == ["a", "c"]
    named = _run(
        held,
        "scan",
        "--index",
        f"by_courier={FN}",
        "--index",
        "by_courier",
        "--prefix",
        "c-1",
        "--reverse",
    )
    assert _keys(named.output) == ["d", "c", "a"]
    status = _run(held, "status", "--offline", "--index", f"by_courier={FN}")
    assert "by_courier v1 ready, 4 entries" in status.output


def test_scan_queries_an_index_by_its_name_alone_from_the_files(held: Path) -> None:
    result = _run(held, "scan", "--index", "by_courier", "--value", "c-1")
    assert result.exit_code == 0, result.output
    assert '{"key":"c","value":{"courier":"c-1"}}' in result.stdout


def test_index_options_that_cannot_work_are_refused(held: Path) -> None:
    cases = {
        ("scan", "--value", "c-1"): "--value needs the index to query",
        ("count", "--index", "by_courier"): "'by_courier' names no function",
        ("count", "--index", "x=no_such_module:fn"): "--index x",
        ("count", "--index", f"x={FN}", "--index-version", "x=two"): "'x=two' is not NAME=N",
        ("count", "--index", f"x={FN}", "--index-version", "y=2"): "index_versions names 'y'",
    }
    for args, message in cases.items():
        result = _run(held, *args)
        assert result.exit_code != 0 and message in result.output, (args, result.output)
