"""`serve --workers` without a broker: a worker ends with the process that started it (kill -9
included), a port another process holds is one line and exit status 2, and /v1/snapshot from
a worker says what to do instead (409)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from click.testing import CliRunner

from globalstore.cli import main
from globalstore.server import ServedStore, ServerSettings, create_app
from globalstore.server.workers import end_with_serve_process
from globalstore.status import State
from tests.unit.server.test_probes import ReportingStore, TestClient, status

# The parent starts a worker as uvicorn does (multiprocessing, spawn), prints its pid, waits.
_PARENT = textwrap.dedent(
    """
    import multiprocessing, time
    from tests.unit.server.test_workers import sleeping_worker
    if __name__ == "__main__":
        worker = multiprocessing.get_context("spawn").Process(target=sleeping_worker)
        worker.start()
        print(worker.pid, flush=True)
        time.sleep(600)
    """
)


def sleeping_worker() -> None:
    """What a worker of serve --workers does to end with the serve process; then it waits."""
    end_with_serve_process()
    time.sleep(600)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not reaped by its new parent yet) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(")")[-1].split()[0] != "Z"


def test_a_worker_ends_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(1.0)  # the child watches its lifeline by now
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait(5)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_a_port_in_use_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        args = ["serve", "--topic", "t", "--bootstrap-servers", "127.0.0.1:1"]
        args += ["--path", str(tmp_path / "s"), "--port", str(port), "--workers", "2"]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use; stop the process "
        "that has it, or pick another --port"
    )
    assert not (tmp_path / "s").exists()  # refused before the store was made


def test_a_snapshot_from_a_worker_says_what_to_do_instead() -> None:
    served = ServedStore.of(ReportingStore(status(State.RUNNING)))  # type: ignore[arg-type]
    app = create_app(served, ServerSettings(snapshots=False))
    with TestClient(app, base_url="http://localhost") as client:
        answer = client.get("/v1/snapshot")
    assert answer.status_code == 409
    assert "without --workers" in answer.json()["error"]
