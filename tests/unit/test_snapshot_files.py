"""The snapshot file formats without a broker: the streamed tar, installation, leftovers."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from globalstore import snapshot
from globalstore.storage import Storage


def test_tar_stream_holds_every_file_byte_for_byte(tmp_path: Path) -> None:
    source = tmp_path / "cp"
    source.mkdir()
    sizes = {"empty": 0, "short": 511, "block": 512, "over": 513, "big": (1 << 20) * 2 + 7}
    for name, size in sizes.items():
        (source / name).write_bytes(os.urandom(size))
    chunks = list(snapshot.tar_chunks(source))
    assert max(len(c) for c in chunks) <= 1 << 20
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r|") as tar:
        seen = {}
        for member in tar:
            data = tar.extractfile(member)
            assert data is not None
            seen[member.name] = data.read()
    assert seen == {f"db/{n}": (source / n).read_bytes() for n in sizes}


def test_a_checkpoint_installs_into_an_empty_store_and_nowhere_else(tmp_path: Path) -> None:
    store = Storage(tmp_path / "a")
    try:
        store.initialise("topic-a", None, 1)
        store.write_values([(b"k", b"v")])
    finally:
        store.close()
    assert snapshot.create(tmp_path / "a", tmp_path / "snap") == tmp_path / "snap" / "db"
    assert snapshot.install(tmp_path / "snap", tmp_path / "b")
    opened = Storage(tmp_path / "b")
    try:
        assert opened.get(b"k") == b"v"
        assert opened.read_meta().topic == "topic-a"
    finally:
        opened.close()
    assert not snapshot.install(tmp_path / "snap", tmp_path / "b"), "b is not empty any more"


def test_a_snapshot_without_a_database_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "snap" / "db").mkdir(parents=True)
    (tmp_path / "snap" / "db" / "OPTIONS-1").write_text("x")
    assert not snapshot.install(tmp_path / "snap", tmp_path / "b")
    assert "db/CURRENT is missing" in caplog.text
    assert snapshot.is_empty(tmp_path / "b")
    assert [p.name for p in (tmp_path / "b").iterdir()] == [], "staging left behind"


def test_snapshot_create_refuses_a_running_store_and_stale_checkpoints_go(tmp_path: Path) -> None:
    running = Storage(tmp_path / "a")
    try:
        with pytest.raises(Exception, match="in use by another process"):
            snapshot.create(tmp_path / "a", tmp_path / "snap")
        leftover = snapshot.checkpoint_dir(tmp_path / "a")
        running.checkpoint(leftover)
        snapshot.remove_stale_checkpoints(tmp_path / "a")
        assert not leftover.exists()
        assert (tmp_path / "a" / "db" / "CURRENT").exists()
    finally:
        running.close()
