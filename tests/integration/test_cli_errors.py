"""Errors a person can read, for the commands that are not about one store: the dev broker's
failures, and -v for the traceback a bug report needs."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from globalstore.cli import main
from tests.integration.test_cli_store import one_line_error


def test_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = CliRunner().invoke(
            main, ["kafka", "start", "--port", port, "--data-dir", str(tmp_path / "k")]
        )
    one_line_error(result, f"port {port}")


_COUNT_WITHOUT_BROKER = [
    "count", "--topic", "t", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "1",
]  # fmt: skip


def _globalstore(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*args, "--path", str(tmp_path / "s")]
    return subprocess.run(
        [sys.executable, "-c", "from globalstore.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_verbose_shows_the_traceback_that_is_otherwise_left_out(tmp_path: Path) -> None:
    quiet = _globalstore(tmp_path, *_COUNT_WITHOUT_BROKER)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    assert quiet.stderr.startswith("error: no Kafka broker answered at 127.0.0.1:1")
    loud = _globalstore(tmp_path, "-v", *_COUNT_WITHOUT_BROKER)
    assert loud.returncode == 1 and "Traceback" in loud.stderr
    assert "BrokerUnavailable" in loud.stderr
