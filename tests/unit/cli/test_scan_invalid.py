"""`globalstore scan` over a store holding values that do not decode, without a broker (the
directory is held, so it answers read-only): the good values on stdout, one line per bad key
on stderr, exit status 1 at the end."""

from __future__ import annotations

from pathlib import Path

import orjson

from globalstore.storage import Storage
from tests.unit.cli.test_index_options import _run, held
from tests.unit.read.test_invalid_values import path

__all__ = ["held", "path"]  # fixtures the tests take by name: pytest finds them here


def test_scan_prints_the_good_values_names_the_bad_and_exits_1(path: Path) -> None:
    storage = Storage(path)  # held, as by a running application
    try:
        result = _run(path, "scan")
        reverse = _run(path, "scan", "--reverse", "--start", "b")
    finally:
        storage.close()
    assert result.exit_code == 1, result.output
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == [
        {"key": "a", "value": 1},
        {"key": "c", "value": {"n": 3}},
        {"key": "e", "value": 5},
    ]
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 2, result.stderr
    assert skipped[0].startswith(
        "skipped: invalid value for key 'b' in topic 't' partition 0 offset 1: not valid JSON"
    )
    assert skipped[1] == (
        "skipped: invalid value for key 'd' in topic 't' partition 0 offset 3: unknown value format"
    )
    assert reverse.exit_code == 1 and len(reverse.stdout.splitlines()) == 2


def test_scan_without_bad_values_exits_0(held: Path) -> None:
    result = _run(held, "scan")
    assert result.exit_code == 0 and "skipped" not in result.stderr
    assert len(result.stdout.splitlines()) == 4
