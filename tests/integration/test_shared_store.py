"""One process writes a store, others read it (SharedStore): they see each write within
milliseconds, follow the writer to a healed copy and to a restarted writer, and keep
answering, saying they are stale, when the writer dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from globalstore import GlobalStore, SharedStore, State, StoreNotReady
from globalstore.replicas.announce import BATCHES, READERS
from tests.integration.serve_support import serving_process, wait_every_worker_ready
from tests.integration.store_support import process_running, produce
from tests.integration.test_store_heal import NEW, OLD, Gate, Reader, _recreate
from tests.waiting import eventually


def follow_process(bootstrap: str, topic: str, path: Path) -> subprocess.Popen[bytes]:
    """`globalstore follow` on `path`: the writer, as a sidecar would run it."""
    command = [str(Path(sys.executable).parent / "globalstore"), "follow", "--topic", topic]
    command += ["--bootstrap-servers", bootstrap, "--path", str(path), "--interval", "1"]
    return subprocess.Popen(command, stderr=subprocess.PIPE)


@pytest.fixture
def writer_path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "store"


def test_readers_see_writes_and_outlive_their_writer(
    kafka_bootstrap: str, make_topic, writer_path: Path
) -> None:
    topic = make_topic(partitions=3)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(300)])
    writer = follow_process(kafka_bootstrap, topic, writer_path)
    readers = [SharedStore(writer_path) for _ in range(2)]
    try:
        for reader in readers:
            reader.start(timeout=60)
            assert reader.count() == 300 and reader["k7"] == 7
        positions = produce(kafka_bootstrap, topic, [("k7", "new"), ("fresh", 1)])
        for reader in readers:
            assert reader.wait_for(positions, timeout=10)
            assert reader["k7"] == "new" and reader.get("fresh") == 1
            status = reader.status()
            assert status.state is State.RUNNING and status.ready, status
            assert status.topic == topic and status.key_count == 301, status
            assert status.behind_writer is not None
        eventually(
            lambda: not any(readers[0].status().behind_writer.values()),  # type: ignore[union-attr]
            5,
            "the reader never caught up with its writer",
        )

        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        eventually(lambda: not readers[0].status().ready, 10, readers[0].status, 0.01)
        status = readers[0].status()
        assert status.state is State.OFFLINE and "not been heard" in (status.last_error or "")
        assert readers[0]["k7"] == "new"  # still answering from the last state

        writer = follow_process(kafka_bootstrap, topic, writer_path)  # restarted
        positions = produce(kafka_bootstrap, topic, [("after-restart", 1)])
        for reader in readers:
            assert reader.wait_for(positions, timeout=60)
            assert reader.get("after-restart") == 1 and reader.status().ready
    finally:
        for reader in readers:
            reader.close()
        writer.send_signal(signal.SIGTERM)
        assert writer.wait(30) == 0, writer.stderr.read().decode() if writer.stderr else ""
    assert os.listdir(writer_path / READERS) == [BATCHES]  # closed readers leave nothing


def test_a_closing_writer_says_so_at_once(
    kafka_bootstrap: str, make_topic, writer_path: Path
) -> None:
    topic = make_topic()
    produce(kafka_bootstrap, topic, [("a", 1)])
    with GlobalStore(topic, kafka_bootstrap, writer_path) as writer:
        reader = SharedStore(writer_path).start(timeout=30)
        assert reader.status().ready
    eventually(lambda: not reader.status().ready, 2, lambda: "no farewell from the writer", 0.01)
    assert reader.status().state is State.OFFLINE and "stopped" in str(reader.status().last_error)
    assert reader["a"] == 1
    reader.close()
    assert writer.status().state is State.CLOSED


def test_a_reader_without_a_writer_times_out_clearly(writer_path: Path) -> None:
    reader = SharedStore(writer_path)
    with pytest.raises(Exception, match="no writer made the store"):
        reader.start(timeout=0.5)
    with pytest.raises(StoreNotReady):
        SharedStore(writer_path).get("a")


def test_readers_follow_their_writer_to_a_healed_copy(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, writer_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, list(OLD.items()))
    gate = Gate()
    writer = GlobalStore(topic, kafka_bootstrap, writer_path, listeners=[gate]).start(60)
    shared = SharedStore(writer_path).start(timeout=30)
    reader = Reader(shared)  # type: ignore[arg-type]  # any store face answers get_many
    reader.start()
    try:
        _recreate(kafka_admin, kafka_bootstrap, topic, gate, NEW)
        eventually(
            lambda: "new" in reader.seen,
            60,
            lambda: f"the reader never moved: {shared.status()}",
            0.01,
        )
        seen = len(reader.seen)
        eventually(
            lambda: len(reader.seen) > seen + 50, 30, lambda: "the reader stopped answering", 0.01
        )
        assert shared.status().path.endswith("rebuild"), shared.status()
    finally:
        reader.stop_event.set()
        reader.join()
        shared.close()
        writer.close()
    assert not reader.wrong, reader.wrong[:5]
    first_new = reader.seen.index("new")
    assert set(reader.seen[:first_new]) == {"old"} and set(reader.seen[first_new:]) == {"new"}


# docs/operations.md's two command lines, each with 4 workers, and how each binds a port.
ASGI_SERVERS: dict[str, tuple[list[str], Callable[[int], list[str]]]] = {
    "uvicorn": (
        ["uvicorn", "--workers", "4", "--host", "127.0.0.1"],
        lambda port: ["--port", str(port)],
    ),
    "gunicorn": (
        ["gunicorn", "-w", "4", "-k", "uvicorn_worker.UvicornWorker"],
        lambda port: ["--bind", f"127.0.0.1:{port}"],
    ),
}


@pytest.mark.parametrize("asgi_server", sorted(ASGI_SERVERS))
def test_four_workers_serve_one_store(
    kafka_bootstrap: str, make_topic, writer_path: Path, asgi_server: str
) -> None:
    topic = make_topic(partitions=3)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(2000)])
    writer = follow_process(kafka_bootstrap, topic, writer_path)
    (program, *options), bind = ASGI_SERVERS[asgi_server]
    command = [str(Path(sys.executable).parent / program), *options]
    env = {**os.environ, "ORDERS_STORE": str(writer_path)}
    server, base = serving_process([*command, "tests.integration.shared_app:app"], env, bind)
    try:
        eventually(
            lambda: len(os.listdir(writer_path / READERS)) == 1 + 4,
            30,
            lambda: "not 4 readers",
            0.01,
        )
        wait_every_worker_ready(base)
        for round_ in range(10):
            written = produce(kafka_bootstrap, topic, [("k7", round_)])
            wanted = ",".join(f"{p}:{o}" for p, o in written.items())
            for _ in range(8):  # a new connection each: the workers take turns accepting
                answer = httpx.get(f"{base}/v1/keys/k7", params={"min_position": wanted})
                assert answer.status_code == 200, answer.text
                assert answer.json()["value"] == round_
        assert httpx.get(f"{base}/v1/count").json()["count"] == 2000
        # One copy on disk: the readers' own directories hold RocksDB's info logs, no data.
        kept = {f.name for f in (writer_path / READERS).glob("*/*/*") if f.is_file()}
        assert kept and all(name.startswith("LOG") for name in kept), kept
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        writer.send_signal(signal.SIGTERM)
        writer.wait(30)
    assert os.listdir(writer_path / READERS) == [BATCHES]  # each worker removed its own


def test_serve_with_workers_writes_once_and_answers_from_every_worker(
    kafka_bootstrap: str, make_topic, writer_path: Path, tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(500)])
    token_file = tmp_path / "token"
    token_file.write_text("t0ken\n")
    command = [str(Path(sys.executable).parent / "globalstore"), "serve", "--topic", topic]
    command += ["--bootstrap-servers", kafka_bootstrap, "--path", str(writer_path)]
    command += ["--workers", "2", "--token-file", str(token_file)]
    server, base = serving_process(command, dict(os.environ))
    auth = {"Authorization": "Bearer t0ken"}
    try:
        # The serve process writes; each worker reads with a SharedStore of its own.
        eventually(
            lambda: len(os.listdir(writer_path / READERS)) == 1 + 2,
            30,
            lambda: f"not 2 readers: {os.listdir(writer_path / READERS)}",
            0.01,
        )
        assert httpx.get(f"{base}/v1/keys/k1").status_code == 401
        wait_every_worker_ready(base)
        for round_ in range(10):
            written = produce(kafka_bootstrap, topic, [("k7", round_)])
            wanted = ",".join(f"{p}:{o}" for p, o in written.items())
            for _ in range(6):  # a new connection each: the workers take turns accepting
                answer = httpx.get(
                    f"{base}/v1/keys/k7", params={"min_position": wanted}, headers=auth
                )
                assert answer.status_code == 200, answer.text
                assert answer.json()["value"] == round_
        assert httpx.get(f"{base}/v1/count", headers=auth).json()["count"] == 500
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(30)
    errors = server.stderr.read()  # type: ignore[union-attr]
    assert code == 0 and "Traceback" not in errors, errors
    assert os.listdir(writer_path / READERS) == [BATCHES]  # each worker removed its own
    # The writer closed the store: the directory opens again, with every write.
    with GlobalStore(topic, kafka_bootstrap, writer_path) as store:
        assert store.get("k7") == 9 and store.count() == 500


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def test_workers_end_with_a_killed_serve_process_and_free_the_port(
    kafka_bootstrap: str, make_topic, writer_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("k", 1)])
    command = [str(Path(sys.executable).parent / "globalstore"), "serve", "--topic", topic]
    command += ["--bootstrap-servers", kafka_bootstrap, "--path", str(writer_path)]
    server, base = serving_process([*command, "--workers", "2"], dict(os.environ))
    port = int(base.rsplit(":", 1)[1])
    try:
        eventually(lambda: len(os.listdir(writer_path / READERS)) == 1 + 2, 30, lambda: "", 0.01)
        workers = _children(server.pid)
        assert len(workers) >= 2, workers
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(10)
    eventually(
        lambda: not any(process_running(pid) for pid in workers),
        5,
        lambda: f"workers still running: {[p for p in workers if process_running(p)]}",
        0.05,
    )
    with socket.socket() as again:  # nobody listens there: a restart can bind it, as serve does
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()
