"""`globalstore kafka start|status|logs|stop` on a broker of the test's own."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from globalstore.cli import main
from tests.ports import PortTakenError, on_a_free_port, says_port_taken


def _kafka(*args: str) -> Result:
    return CliRunner().invoke(main, ["kafka", *args])


def _start(tmp_path: Path) -> tuple[list[str], Result]:
    """`kafka start` on a port that was free a moment ago: if another process took it before
    the broker bound it, the command says so, and the test tries another port."""

    def start(port: int) -> tuple[list[str], Result]:
        where = ["--port", str(port), "--data-dir", str(tmp_path / "k")]
        started = _kafka("start", *where, "--heap", "512m", "--timeout", "180")
        if started.exit_code != 0 and says_port_taken(started.output):
            raise PortTakenError(started.output)
        return where, started

    return on_a_free_port(start)


def test_start_status_logs_stop(tmp_path: Path) -> None:
    where, started = _start(tmp_path)
    try:
        assert started.exit_code == 0, started.output
        bootstrap = started.stdout.strip()
        assert bootstrap == f"127.0.0.1:{where[1]}" and "ready in" in started.stderr

        again = _kafka("start", *where)
        assert again.exit_code == 0 and "already running" in again.stderr

        status = _kafka("status", *where)
        assert status.exit_code == 0 and "running (pid" in status.stdout
        assert bootstrap in status.stdout

        logs = _kafka("logs", *where, "-n", "5")
        assert logs.exit_code == 0 and 0 < len(logs.stdout.splitlines()) <= 5
    finally:
        stopped = _kafka("stop", *where)
    assert stopped.exit_code == 0 and stopped.stdout.strip() == "stopped"
    after = _kafka("status", *where)
    assert after.exit_code == 3 and "stopped" in after.stdout
    assert _kafka("stop", *where).stdout.strip() == "not running"
