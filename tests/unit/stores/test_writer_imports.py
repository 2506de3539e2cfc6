"""The writer process of SharedStore.with_writer() imports from where its parent does, never
from its working directory first (no broker needed: the child imports at its start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# A parent run as a script (its own directory first on its path, not its working directory).
_PARENT = textwrap.dedent(
    """
    import sys, time
    from globalstore import SharedStore
    store = SharedStore.with_writer("t", "127.0.0.1:9", sys.argv[1]).start(wait=False)
    time.sleep(3)  # the writer has started and imported what it imports
    store.close()
    """
)
_PLANTED = "import pathlib\npathlib.Path('planted-ran').write_text('ran')\nraise SystemExit(3)\n"


def test_a_module_planted_in_the_working_directory_never_runs_in_the_writer(
    tmp_path: Path,
) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "app.py").write_text(_PARENT)
    shared = tmp_path / "shared"  # the working directory, writable by others
    shared.mkdir()
    (shared / "json.py").write_text(_PLANTED)
    (shared / "logging").mkdir()
    (shared / "logging" / "__init__.py").write_text(_PLANTED)
    parent = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "app.py"), str(tmp_path / "s")],
        check=False,
        cwd=shared,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert parent.returncode == 0, parent.stderr[-2000:]
    assert not (shared / "planted-ran").exists()
