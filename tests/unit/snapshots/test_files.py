"""The snapshot file formats without a broker: the streamed tar and its manifest,
installation, leftovers."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from globalstore.snapshots import archive as snapshot
from globalstore.snapshots.manifest import MANIFEST, FileEntry, Manifest, Sha256Behind
from globalstore.snapshots.stream import tar_chunks
from globalstore.storage import Storage, meta
from tests.snapshot_peer import checkpoint_of_a_store


def test_hashing_behind_the_caller_gives_the_digest_of_the_chunks_in_order() -> None:
    chunks = [bytes([i]) * (3000 + i) for i in range(50)]  # unequal: an order mix-up shows
    with Sha256Behind() as digest:
        for chunk in chunks:
            digest.update(chunk)
        assert digest.hexdigest() == hashlib.sha256(b"".join(chunks)).hexdigest()


def test_tar_stream_holds_every_file_byte_for_byte_then_the_manifest(tmp_path: Path) -> None:
    checkpoint = checkpoint_of_a_store(tmp_path, values=5_000)  # table files over 1 MiB
    chunks = list(tar_chunks(checkpoint))
    assert max(len(c) for c in chunks) <= 1 << 20
    body = b"".join(chunks)
    assert body.endswith(bytes(1024))
    with tarfile.open(fileobj=io.BytesIO(body), mode="r|") as tar:
        seen = {}
        for member in tar:
            data = tar.extractfile(member)
            assert data is not None
            seen[member.name] = data.read()
    files = {f"db/{p.name}": p.read_bytes() for p in checkpoint.iterdir()}
    assert list(seen)[-1] == MANIFEST, "the manifest is the last entry"
    assert max(len(data) for data in files.values()) > 1 << 20
    assert {n: d for n, d in seen.items() if n != MANIFEST} == files
    manifest = Manifest.parse(seen[MANIFEST])
    assert (manifest.topic, manifest.layout, manifest.offsets) == ("topic-a", 1, {0: 5_000})
    assert {f"db/{f.name}": (f.size, f.sha256) for f in manifest.files} == {
        name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items()
    }


def test_a_checkpoint_installs_into_an_empty_store_and_nowhere_else(tmp_path: Path) -> None:
    store = Storage(tmp_path / "a")
    try:
        store.initialise("topic-a", "id-of-topic-a", 1)
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
    files = [FileEntry.of_file(tmp_path / "snap" / "db" / "OPTIONS-1")]
    (tmp_path / "snap" / MANIFEST).write_bytes(Manifest.of(files, meta.Meta(None)).to_bytes())
    assert not snapshot.install(tmp_path / "snap", tmp_path / "b")
    assert "db/CURRENT is missing" in caplog.text
    assert snapshot.is_empty(tmp_path / "b")
    assert [p.name for p in (tmp_path / "b").iterdir()] == [], "staging left behind"


def test_snapshot_create_refuses_a_running_store_and_stale_checkpoints_go(tmp_path: Path) -> None:
    running = Storage(tmp_path / "a")
    try:
        with pytest.raises(Exception, match="in use by another store in this process"):
            snapshot.create(tmp_path / "a", tmp_path / "snap")
        leftover = snapshot.checkpoint_dir(tmp_path / "a")
        running.checkpoint(leftover)
        staging = tmp_path / "a" / "snapshot-x1y2" / "db"  # a kill -9 during an install
        staging.mkdir(parents=True)
        (staging / "000001.sst").write_bytes(b"half")
        snapshot.remove_stale_checkpoints(tmp_path / "a")
        assert not leftover.exists() and not staging.parent.exists()
        assert (tmp_path / "a" / "db" / "CURRENT").exists()
    finally:
        running.close()
