"""`serve --workers` without a broker: a worker ends with the process that started it (kill -9
included), a port another process holds is one line and exit status 2, and /v1/snapshot from
a worker says what to do instead (409)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from globalstore.cli import main
from globalstore.server import ServedStore, ServerSettings, create_app
from globalstore.server.workers import end_with_serve_process
from globalstore.status import State
from tests.unit.server.test_change_stream_bounds import healthy
from tests.unit.server.test_probes import ReportingStore, TestClient, status
from tests.waiting import eventually

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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def children_of(pid: int, marker: bytes) -> list[int]:
    """The children of `pid` whose command line holds `marker`."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        for child in children:
            with contextlib.suppress(FileNotFoundError):  # a child reaped meanwhile
                if marker in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(int(child))
    return found


def _workers_of(pid: int) -> list[int]:
    return children_of(pid, b"spawn_main")


def test_workers_get_the_secrets_through_their_pipe_and_read_no_file_again(
    tmp_path: Path,
) -> None:
    """The Kafka password and the token reach the workers (they serve with that token),
    but no worker's environment holds them, and a token file changed after the serve
    process read it changes nothing (a worker started again serves the same token)."""
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    port = _free_port()
    command = [str(Path(sys.executable).parent / "globalstore"), "serve", "--topic", "t"]
    command += ["--bootstrap-servers", "127.0.0.1:9", "--path", str(tmp_path / "s")]
    command += ["--port", str(port), "--workers", "2", "--token-file", str(token_file)]
    command += ["--kafka-config", "sasl.password=hunter2"]
    env = {k: v for k, v in os.environ.items() if k != "GLOBALSTORE_TOKEN"}
    serve = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        eventually(lambda: healthy(base), 30, lambda: "no worker answered")
        workers = _workers_of(serve.pid)
        assert len(workers) == 2
        for worker in workers:
            environ = Path(f"/proc/{worker}/environ").read_bytes()
            assert b"hunter2" not in environ and b"first-token" not in environ
        token_file.write_text("swapped-token\n")
        os.kill(workers[0], signal.SIGKILL)  # uvicorn starts another
        eventually(lambda: len(set(_workers_of(serve.pid)) - set(workers)) == 1, 30,
                   lambda: "no worker started again")  # fmt: skip
        for _ in range(6):  # whichever worker answers
            assert _status(base, "first-token") == 200 and _status(base, "swapped-token") == 401
    finally:
        serve.terminate()
        serve.wait(30)


def _status(base: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{base}/v1/status", headers=headers, timeout=5).status_code
