"""The README's "From the shell" block, run as written, top to bottom: a new user's first
steps must keep working as the CLI changes. Its own broker (on a free port, through
GLOBALSTORE_BOOTSTRAP, which every command honours) and its own directories."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.ports import PortTakenError, on_a_free_port, says_port_taken

ROOT = Path(__file__).resolve().parents[2]


def shell_block() -> list[str]:
    """The commands of the first ```sh block after the "From the shell" heading."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## From the shell") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "no sh block under 'From the shell'"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_block_is_the_first_hour() -> None:
    # Not vacuous: the block does what the README promises, in that order.
    commands = [line.split("#")[0].split()[:3] for line in shell_block()]
    assert commands[0] == ["globalstore", "kafka", "start"]
    assert ["globalstore", "pipeline", "generate"] in commands
    assert commands[-1] == ["globalstore", "kafka", "stop"]


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


def _start_broker(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The block's `kafka start`, on the port GLOBALSTORE_BOOTSTRAP names, picked free: if
    another process took it before the broker bound it, the command says so; try another."""

    def start(port: int) -> subprocess.CompletedProcess[str]:
        env["GLOBALSTORE_BOOTSTRAP"] = f"127.0.0.1:{port}"
        done = _run(line, cwd, env)
        if done.returncode != 0 and says_port_taken(done.stderr):
            raise PortTakenError(done.stderr)
        return done

    return on_a_free_port(start)


@pytest.mark.timeout(900)
def test_the_readme_shell_block_runs_verbatim(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "XDG_DATA_HOME": str(tmp_path / "xdg"),  # `kafka start`'s data dir, not the user's
    }
    env.pop("GLOBALSTORE_TEST_BOOTSTRAP", None)
    outputs = {}
    try:
        for n, line in enumerate(shell_block()):
            done = _start_broker(line, tmp_path, env) if n == 0 else _run(line, tmp_path, env)
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, f"{line}\n{done.stderr}"
            outputs[line.split("#")[0].split()[1]] = done.stdout
    finally:
        subprocess.run(
            ["bash", "-c", "globalstore kafka stop"], cwd=tmp_path, env=env, check=False,
            capture_output=True, timeout=120,
        )  # fmt: skip
    order = orjson.loads(outputs["get"])
    assert order["order_id"] == "o-0000015" and order["status"] not in ("DELIVERED", "CANCELLED")
    assert "key" in orjson.loads(outputs["scan"].splitlines()[0])
    assert "keys:" in outputs["status"] and "state:          running" in outputs["status"]
