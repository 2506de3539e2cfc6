"""Snapshots: a new instance boots from a peer's checkpoint and catches up from the offsets
inside it; a snapshot that does not fit the topic is refused with a WARNING and the instance
restores from Kafka instead. Real broker, real stores."""

from __future__ import annotations

import io
import logging
import shutil
import tarfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from globalstore import GlobalStore, StoreListener, end_offsets
from globalstore.cli import main
from globalstore.server import ServerSettings
from globalstore.storage import Storage
from tests.integration.serve_support import (
    metric,
    produce_incompressible,
    raw_get,
    running_server,
    served_store,
    wait_ready,
)
from tests.integration.store_support import produce, set_topic_config
from tests.waiting import eventually


class _Starts(StoreListener):
    """Records where each restore started and how many records it had to read."""

    def __init__(self) -> None:
        self.to_read: list[int] = []
        self.started_at: list[int] = []  # sum of the start offsets

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        self.to_read.append(sum(end_offsets[p] - start_offsets[p] for p in end_offsets))
        self.started_at.append(sum(start_offsets.values()))


class _BootDuringWrites(StoreListener):
    """Holds B's restore, once planned from the snapshot's offsets, until the writer has
    produced another batch: records surely flow while B boots, however fast the machine."""

    def __init__(self, flowing: list[list[tuple[str, object]]]) -> None:
        self.flowing = flowing

    def on_restore_start(self, topic, start_offsets, end_offsets) -> None:  # type: ignore[no-untyped-def]
        _wait_for_batches(self.flowing, len(self.flowing) + 1)


def _wait_for_batches(flowing: list[list[tuple[str, object]]], count: int) -> None:
    produced = lambda: f"the writer produced {len(flowing)} batches"  # noqa: E731
    eventually(lambda: len(flowing) >= count, 60, produced, interval_s=0.01)


def _content(store: GlobalStore) -> dict[str, object]:
    return dict(store.items())


def _expected(*batches: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for batch in batches:
        for key, value in batch:
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
    return out


def test_new_instance_boots_from_a_peer_snapshot_while_records_flow(
    kafka_bootstrap: str,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = make_topic(partitions=3)
    first = [(f"k{i:05d}", {"v": i}) for i in range(20_000)]
    produce(kafka_bootstrap, topic, first)
    flowing: list[list[tuple[str, object]]] = []
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            batch: list[tuple[str, object]] = [
                (f"k{i:05d}", {"v": -n}) for i in range(n, 20_000, 97)
            ]
            batch += [(f"k{i:05d}", None) for i in range(n, 20_000, 331)]
            produce(kafka_bootstrap, topic, batch)
            flowing.append(batch)

    monkeypatch.setenv("GLOBALSTORE_PEER_TOKEN", "peer-token")  # B sends it to fetch the snapshot
    settings = ServerSettings(token="peer-token")
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "a"), settings) as client:
        client.headers["Authorization"] = "Bearer peer-token"
        wait_ready(client)
        writer = threading.Thread(target=write)
        writer.start()
        try:
            _wait_for_batches(flowing, 1)  # records flow before B asks for the snapshot...
            starts, during = _Starts(), _BootDuringWrites(flowing)  # ...and while B boots
            caplog.set_level(logging.INFO, logger="globalstore")
            url = str(client.base_url).rstrip("/") + "/v1/snapshot"
            with GlobalStore(
                topic,
                kafka_bootstrap,
                tmp_path / "b",
                listeners=[starts, during],
                bootstrap_from=url,
            ).start(timeout=60) as b:
                stop.set()
                writer.join(60)
                assert b.wait_for(end_offsets(kafka_bootstrap, topic), timeout=30)
                assert _content(b) == _expected(first, *flowing)
                assert b.count() == len(_expected(first, *flowing))
        finally:
            stop.set()
            writer.join(60)
    assert len(flowing) >= 2, "records did not keep flowing while B booted"
    assert "installed snapshot" in caplog.text
    assert "refused" not in caplog.text and "rebuilding" not in caplog.text, caplog.text
    # B started from the snapshot's offsets (which cover at least the first 20,000 records
    # A had applied when it turned ready), not from the beginning; how much it then read
    # depends on how fast the writer ran meanwhile.
    assert starts.started_at and starts.started_at[0] >= 20_000, (starts.started_at, starts.to_read)


def _garble(snapshot_dir: Path) -> None:
    manifest = next((snapshot_dir / "db").glob("MANIFEST-*"))
    manifest.write_bytes(b"\x00garbage\xff" * 64)


def test_unfit_snapshots_are_refused_and_the_store_restores_from_kafka(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, other = make_topic(partitions=2), make_topic(partitions=2)
    records = [(f"r{i}", {"i": i}) for i in range(300)]
    produce(kafka_bootstrap, topic, records)
    produce(kafka_bootstrap, other, [(f"o{i}", i) for i in range(50)])
    for name, source in ((topic, tmp_path / "mine"), (other, tmp_path / "foreign")):
        GlobalStore(name, kafka_bootstrap, tmp_path / f"store-{name}").start(30).close()
        made = CliRunner().invoke(
            main, ["snapshot", "create", "--path", str(tmp_path / f"store-{name}"), str(source)]
        )
        assert made.exit_code == 0, made.output
    shutil.copytree(tmp_path / "mine", tmp_path / "corrupt")
    _garble(tmp_path / "corrupt")

    def boot(source: Path, path: Path) -> _Starts:
        starts = _Starts()
        caplog.clear()
        with GlobalStore(
            topic, kafka_bootstrap, path, listeners=[starts], bootstrap_from=str(source)
        ).start(timeout=60) as store:
            assert _content(store) == _expected(records)
        return starts

    assert boot(tmp_path / "mine", tmp_path / "ok").to_read == [0]  # a fitting one is used
    assert "rebuilding" not in caplog.text
    argv = ["restore", "--topic", topic, "--bootstrap-servers", kafka_bootstrap]
    argv += ["--path", str(tmp_path / "cli"), "--from-snapshot", str(tmp_path / "mine")]
    restored = CliRunner().invoke(main, argv)
    assert restored.exit_code == 0, restored.output
    assert restored.stdout.startswith("ready: 300 keys"), restored.stdout
    assert "installed snapshot" in restored.stderr and "0 records to read" in restored.stderr

    cases = [
        ("foreign", tmp_path / "foreign", f"store holds topic {other!r}"),
        ("corrupt", tmp_path / "corrupt", "bytes, the manifest says"),
        ("missing", tmp_path / "nothing-here", "snapshot"),
    ]
    for label, source, why in cases:
        starts = boot(source, tmp_path / f"b-{label}")
        assert starts.to_read == [300], (label, starts.to_read)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(why in w for w in warnings), (label, warnings)

    # The snapshot is now older than the retention.
    set_topic_config(kafka_admin, topic, "delete.retention.ms", "1")
    starts = boot(tmp_path / "mine", tmp_path / "b-old")
    assert starts.to_read == [300], starts.to_read
    assert "longer than its delete.retention.ms" in caplog.text, caplog.text


def test_a_store_that_must_be_rebuilt_rebuilds_from_the_peer_snapshot(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    # B was away longer than delete.retention.ms, so it may not resume; given a peer, it
    # rebuilds from the peer's snapshot (checked like any store) instead of the whole topic.
    topic = make_topic(partitions=2)
    records = [(f"k{i:05d}", {"v": i}) for i in range(5_000)]
    produce(kafka_bootstrap, topic, records)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "b"):
        pass
    # B last held the end 700 s ago, beyond a 600 s retention; A's snapshot, taken below,
    # is seconds old however slow the machine.
    set_topic_config(kafka_admin, topic, "delete.retention.ms", "600000")
    b_storage = Storage(tmp_path / "b")
    b_storage.mark_in_sync(int(time.time() * 1000) - 700_000)
    b_storage.close()
    later = [(f"k{i:05d}", None) for i in range(0, 5_000, 7)]
    produce(kafka_bootstrap, topic, later)
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "a")) as client:
        wait_ready(client)  # A holds the end now: its snapshot is young
        url = str(client.base_url).rstrip("/") + "/v1/snapshot"
        starts = _Starts()
        caplog.set_level(logging.INFO, logger="globalstore")
        with GlobalStore(
            topic, kafka_bootstrap, tmp_path / "b", listeners=[starts], bootstrap_from=url
        ).start(timeout=60) as b:
            reason = b.status().rebuild_reason
            assert reason is not None and "delete.retention.ms" in reason
            assert b.wait_for(end_offsets(kafka_bootstrap, topic), timeout=30)
            assert _content(b) == _expected(records, later)
    assert f"from snapshot {url}" in caplog.text and "installed snapshot" in caplog.text
    total = 5_000 + len(later)
    assert starts.started_at == [total] and starts.to_read == [0], (starts.started_at, total)


def _checkpoints(store_path: Path) -> list[str]:
    return sorted(p.name for p in store_path.glob("checkpoint-*"))


def _no_checkpoint_left(store_path: Path) -> None:
    eventually(lambda: not _checkpoints(store_path), 30, lambda: _checkpoints(store_path))


def test_a_snapshot_abandoned_before_its_first_byte_halfway_or_at_shutdown_leaves_nothing(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce_incompressible(kafka_bootstrap, topic, 3000)  # a 12 MB snapshot
    path = tmp_path / "s"
    settings = ServerSettings(idle_timeout=120)  # only hang-ups and the shutdown end these
    with running_server(served_store(topic, kafka_bootstrap, path), settings) as client:
        wait_ready(client)
        answered = 'globalstore_http_request_seconds_count{route="snapshot"}'
        running = 'globalstore_http_streams{route="snapshot"}'

        raw_get(client, "/v1/snapshot").close()  # hangs up before any answer
        eventually(lambda: metric(client, answered) == 1, 30, lambda: metric(client, answered))
        eventually(lambda: metric(client, running) == 0, 30, lambda: metric(client, running))
        _no_checkpoint_left(path)

        with client.stream("GET", "/v1/snapshot") as response:
            assert response.status_code == 200, response.read()
            received = 0
            for chunk in response.iter_bytes():
                received += len(chunk)
                if received > 2 << 20:
                    break  # hangs up halfway
        eventually(lambda: metric(client, running) == 0, 30, lambda: metric(client, running))
        _no_checkpoint_left(path)

        held = raw_get(client, "/v1/snapshot")  # never reads: the server's send blocks
        eventually(lambda: len(_checkpoints(path)) == 1, 30, lambda: _checkpoints(path))
    # The server stopped with the stream still blocked (cancelled after graceful_seconds).
    held.close()
    assert not _checkpoints(path)
    with GlobalStore(topic, kafka_bootstrap, path) as again:  # closed cleanly, not damaged
        assert again.count() == 3000


def _disk_use(store_path: Path) -> int:
    """Bytes of every file under the store, a hard-linked file counted at each of its names:
    what the disk would hold once RocksDB compacts the originals away."""
    return sum(f.stat().st_size for f in store_path.rglob("*") if f.is_file())


def test_ten_concurrent_snapshots_run_at_most_two_at_once_and_disk_use_comes_back(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce_incompressible(kafka_bootstrap, topic, 3000)
    path = tmp_path / "s"
    with running_server(served_store(topic, kafka_bootstrap, path)) as client:  # the default cap
        wait_ready(client)
        assert "db/CURRENT" in _tar_names(client.get("/v1/snapshot").content)  # flushes once
        before = _disk_use(path)
        answers: list[tuple[int, str | None, float, list[str]]] = []
        holding = threading.Barrier(11)  # the ten clients and this test

        def ask() -> None:
            began = time.monotonic()
            with client.stream("GET", "/v1/snapshot", params={"wait": "0.5"}) as response:
                waited = time.monotonic() - began
                holding.wait(60)  # nobody reads until all ten have their answer
                holding.wait(60)  # and the test has counted the checkpoints
                names = _tar_names(response.read()) if response.status_code == 200 else []
                retry_after = response.headers.get("retry-after")
                answers.append((response.status_code, retry_after, waited, names))

        askers = [threading.Thread(target=ask) for _ in range(10)]
        for asker in askers:
            asker.start()
        holding.wait(60)
        during = _checkpoints(path)
        holding.wait(60)
        for asker in askers:
            asker.join(60)
        assert len(during) == 2, during
        served = [a for a in answers if a[0] == 200]
        refused = [a for a in answers if a[0] != 200]
        assert len(served) == 2 and len(refused) == 8, answers
        assert all("db/CURRENT" in names for *_, names in served), served
        for status, retry_after, waited, _ in refused:
            assert status == 503 and retry_after == "5", refused
            assert 0.5 <= waited < 5, waited  # its own wait, then the answer
        _no_checkpoint_left(path)
        after = _disk_use(path)
        assert after <= before + (1 << 20), (before, after)
        linked = [f.name for f in (path / "db").iterdir() if f.stat().st_nlink > 1]
        assert not linked, f"table files still hard-linked elsewhere: {linked}"


def _tar_names(body: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        return tar.getnames()
