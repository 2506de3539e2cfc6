"""A type checker in a user's project sees globalstore's types through the install `make`
makes (an editable one), not Any."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MYPY = Path(sys.executable).with_name("mypy")


def test_a_user_project_type_checks_against_the_library(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(
        "from globalstore import GlobalStore\n"
        "store = GlobalStore('t', '127.0.0.1:9092', 'state/t')\n"
        "reveal_type(store.get)\n"
        "store.get(17)\n"
        "import rocksdict\n"
        "reveal_type(rocksdict.Rdict.keys)\n"
    )
    result = subprocess.run(
        [str(MYPY), "--no-incremental", str(app)],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "import-not-found" not in result.stdout, result.stdout
    assert "def (key: str" in result.stdout  # the signature, not Any
    assert 'incompatible type "int"' in result.stdout  # so a wrong call is caught
    # rocksdict's own types: the stub of the rocksdict calls storage/ makes (stubs/) is for
    # this repository's type checking and ships nowhere a user's type checker looks.
    assert "RdictKeys" in result.stdout, result.stdout
