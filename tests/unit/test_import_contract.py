"""The import contracts of pyproject.toml (`lint-imports`, run by `make test`) are not
vacuous: on a copy of the tree, one reversed import breaks them and is named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.so")
    for package in ("globalstore", "pipelines"):
        shutil.copytree(ROOT / package, dest / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [str(LINT_IMPORTS), "--no-cache"]
    return subprocess.run(command, check=False, cwd=tree, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # a floor importing one above it
        ("globalstore/storage/lock.py", "import globalstore.follow.thread", "storage.lock"),
        # two siblings of one floor
        ("globalstore/read/queries.py", "import globalstore.follow.topic", "read.queries"),
        # RocksDB outside storage/
        ("globalstore/follow/events.py", "import rocksdict", "rocksdict"),
        # a pipeline reaching past the topic contract
        ("pipelines/records.py", "import globalstore.stores.global_store", "pipelines.records"),
    ],
)
def test_a_reversed_import_breaks_the_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    _copy_tree(tmp_path)
    assert _lint(tmp_path).returncode == 0, "the copy keeps the contracts before the change"
    with (tmp_path / module).open("a") as f:
        f.write(f"\n{line}  # reversed on purpose\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and broken in result.stdout
