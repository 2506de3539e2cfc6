"""Installing a snapshot, without a broker: only a whole one, as its manifest describes it,
is moved into place; a cut, corrupted or hostile one is refused with a WARNING and leaves
the store directory empty. The token never follows a redirect to another origin; the install
has a deadline and close() stops it."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import tarfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import IO

import pytest

from globalstore import GlobalStore, StoreClosed
from globalstore.snapshots import archive as snapshot
from globalstore.snapshots import fetch
from globalstore.snapshots.digests import KnownDigests
from globalstore.snapshots.manifest import MANIFEST, Manifest, Staging
from globalstore.snapshots.stream import tar_chunks
from globalstore.storage import DirLock, Storage
from tests.snapshot_peer import (
    Peer,
    Route,
    checkpoint_of_a_store,
    entry,
    gnu_sparse,
    hostile_tars,
    huge_header,
    members,
    snapshot_bytes,
    tar_of,
)


@pytest.fixture
def body(tmp_path: Path) -> bytes:
    """A snapshot of 3,000 keys as GET /v1/snapshot sends it (table files over 1 MiB)."""
    return snapshot_bytes(checkpoint_of_a_store(tmp_path, values=3_000))


@pytest.fixture
def peer() -> Peer:
    with Peer() as running:
        yield running  # type: ignore[misc]


def _refused(source: str | Path, store: Path, caplog: pytest.LogCaptureFixture) -> str:
    """Install `source` into `store`, which must stay empty; the WARNING's text."""
    caplog.clear()
    assert not snapshot.install(source, store)
    assert snapshot.is_empty(store)
    assert [p.name for p in store.iterdir()] == [], "something was left behind"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "refused" in warnings[0], warnings
    return warnings[0]


def _installed_keys(store: Path) -> int:
    opened = Storage(store)
    try:
        return sum(1 for _ in opened.scan(None, None, False))
    finally:
        opened.close()


def test_a_whole_snapshot_installs(tmp_path: Path, body: bytes, peer: Peer) -> None:
    peer.serve(body, pieces=7)
    assert snapshot.install(peer.url(), tmp_path / "b")
    assert _installed_keys(tmp_path / "b") == 3_000


def test_a_cut_corrupted_or_padded_tar_is_refused(
    tmp_path: Path, body: bytes, peer: Peer, caplog: pytest.LogCaptureFixture
) -> None:
    entries = list(members(body))
    manifest = entries[-1]
    assert manifest.name == MANIFEST
    biggest = max(entries[:-1], key=lambda m: m.size)
    assert biggest.size > 1 << 20
    flipped = bytearray(body)
    flipped[biggest.offset_data + biggest.size // 2] ^= 0x01
    cases = {
        "before the manifest": (body[: manifest.offset], "ends before its manifest"),
        "between two files": (body[: entries[2].offset], "ends before its manifest"),
        "in a file": (body[: biggest.offset_data + biggest.size // 2], "unexpected end of data"),
        "in the end marker": (body[:-1024], "end-of-archive marker is missing"),
        "a flipped byte": (bytes(flipped), f"{biggest.name[3:]} does not match its SHA-256"),
        "data after the end": (body + b"\0" * 4096, "data follows the end"),
        "an entry after it": (body[:-1024] + body[: entries[1].offset], "after the manifest"),
    }  # fmt: skip
    for label, (crafted, why) in cases.items():
        peer.serve(crafted, pieces=3)
        warning = _refused(peer.url(), tmp_path / "b", caplog)
        assert why in warning, (label, warning)


def test_hostile_tars_are_refused_and_write_nothing_outside(
    tmp_path: Path, peer: Peer, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "deep" / "b"
    reasons = {
        "climbs out": "'../escaped' is not a plain file name",
        "climbs out of db": "unexpected entry '../escaped'",
        "absolute": "unexpected entry '/tmp/globalstore-escaped'",
        "symlink": "'db/CURRENT' is not a regular file",
        "hard link": "'db/CURRENT' is not a regular file",
    }
    for label, crafted in hostile_tars().items():
        peer.serve(crafted)
        warning = _refused(peer.url(), store, caplog)
        assert reasons[label] in warning, (label, warning)
        assert "escaped" not in {p.name for p in store.parent.iterdir()}, label
        assert not Path("/tmp/globalstore-escaped").exists(), label


def test_a_directory_snapshot_is_checked_against_its_manifest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint_of_a_store(tmp_path)  # the store at tmp_path/a
    snapshot.create(tmp_path / "a", tmp_path / "snap")
    assert (tmp_path / "snap" / MANIFEST).is_file()

    def variant(label: str) -> Path:
        copy = tmp_path / label
        shutil.copytree(tmp_path / "snap", copy, symlinks=True)
        return copy

    no_manifest, extra, tampered, linked = (variant(n) for n in ("m", "e", "t", "l"))
    (no_manifest / MANIFEST).unlink()
    (extra / "db" / "000099.sst").write_bytes(b"extra")
    table = sorted((tampered / "db").glob("*.sst"))[0]
    table.write_bytes(table.read_bytes()[:-1] + b"?")
    current = linked / "db" / "CURRENT"
    current.unlink()
    current.symlink_to(tmp_path / "snap" / "db" / "CURRENT")
    cases = {
        no_manifest: "manifest.json",
        extra: "000099.sst is in the snapshot but not in the manifest",
        tampered: f"{table.name} does not match its SHA-256",
        linked: "CURRENT is not a regular file",
    }
    for source, why in cases.items():
        warning = _refused(source, tmp_path / "b", caplog)
        assert why in warning, warning
    assert snapshot.install(tmp_path / "snap", tmp_path / "b")
    assert _installed_keys(tmp_path / "b") == 3


def test_the_token_never_follows_a_redirect_to_another_origin(
    tmp_path: Path,
    body: bytes,
    peer: Peer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(fetch.PEER_TOKEN_ENV, "s3cret")
    with Peer() as other:  # another port: another origin
        other.serve(body)
        peer.routes["/moved"] = peer.routes["/v1/snapshot"] = Route(redirect=other.url())
        peer.routes["/old"] = Route(redirect=peer.url("/here"))  # same origin
        peer.serve(body, path="/here")
        assert snapshot.install(peer.url(), tmp_path / "b")
        assert snapshot.install(peer.url("/old"), tmp_path / "c")
    authorized = {path: headers.get("Authorization") for path, headers in peer.requests}
    assert authorized == {"/v1/snapshot": "Bearer s3cret", "/old": "Bearer s3cret",
                          "/here": "Bearer s3cret"}  # fmt: skip
    assert [headers.get("Authorization") for _, headers in other.requests] == [None]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("not sending the token" in w for w in warnings), warnings


def test_an_install_past_its_deadline_is_refused(
    tmp_path: Path, body: bytes, peer: Peer, caplog: pytest.LogCaptureFixture
) -> None:
    peer.serve(body, pieces=60, pause=0.5)  # 30 s
    began = time.monotonic()
    assert not snapshot.install(peer.url(), tmp_path / "b", timeout=1.0)
    assert time.monotonic() - began < 5
    assert "took longer than 1s" in caplog.text
    assert [p.name for p in (tmp_path / "b").iterdir()] == []


def test_close_stops_an_install_and_releases_the_directory(
    tmp_path: Path, body: bytes, peer: Peer
) -> None:
    peer.serve(body, pieces=60, pause=0.5)  # 30 s
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "b", bootstrap_from=peer.url())
    raised: list[BaseException] = []

    def start() -> None:
        try:
            store.start(timeout=60)
        except BaseException as exc:
            raised.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    while peer.sent == 0:
        time.sleep(0.01)
    with pytest.raises(Exception, match="in use by another store in this process"):
        DirLock(tmp_path / "b")  # the install runs under the store's lock
    began = time.monotonic()
    store.close()
    starting.join(10)
    assert not starting.is_alive() and time.monotonic() - began < 5
    assert len(raised) == 1 and isinstance(raised[0], StoreClosed), raised
    DirLock(tmp_path / "b").release()  # released
    assert snapshot.is_empty(tmp_path / "b")


def test_a_busy_peer_is_asked_again_as_its_retry_after_says(
    tmp_path: Path, body: bytes, peer: Peer
) -> None:
    # Every slot taken (503): a booting instance waits its turn instead of replaying.
    peer.serve(body)
    peer.routes["/v1/snapshot"].busy = 2
    began = time.monotonic()
    assert snapshot.install(peer.url(), tmp_path / "b")
    assert len(peer.requests) == 3 and time.monotonic() - began >= 0.4
    assert _installed_keys(tmp_path / "b") == 3_000


def test_a_peer_busy_past_the_deadline_leaves_the_store_to_kafka(
    tmp_path: Path, body: bytes, peer: Peer, caplog: pytest.LogCaptureFixture
) -> None:
    peer.serve(body)
    peer.routes["/v1/snapshot"].busy = 1_000
    began = time.monotonic()
    assert not snapshot.install(peer.url(), tmp_path / "b", timeout=1.0)
    assert 1.0 <= time.monotonic() - began < 3
    assert "took longer than 1s" in caplog.text and len(peer.requests) > 2
    assert [p.name for p in (tmp_path / "b").iterdir()] == []


def test_a_table_file_sent_before_is_not_hashed_again(
    tmp_path: Path, peer: Peer, caplog: pytest.LogCaptureFixture
) -> None:
    """A second send of the same table files takes their digests from the first; bytes that
    rotted on disk in between no longer match them, and the receiver refuses the snapshot.
    Files other than tables are hashed on every send."""
    checkpoint = checkpoint_of_a_store(tmp_path, values=3_000)
    known = KnownDigests()
    first = _sent_digests(b"".join(tar_chunks(checkpoint, known=known)))
    table = max(checkpoint.glob("*.sst"), key=lambda p: p.stat().st_size)
    options = next(checkpoint.glob("OPTIONS-*"))
    assert options.read_bytes().startswith(b"# This")  # a comment: the bit flipped below
    _rot(table, table.stat().st_size // 2)
    _rot(options, 2)
    again = b"".join(tar_chunks(checkpoint, known=known))
    second = _sent_digests(again)
    assert second[table.name] == first[table.name] != _sha256(table)
    assert second[options.name] == _sha256(options) != first[options.name]
    peer.serve(again)
    warning = _refused(peer.url(), tmp_path / "b", caplog)
    assert f"{table.name} does not match its SHA-256" in warning


def test_known_digests_are_of_table_files_and_the_least_recently_used_go(tmp_path: Path) -> None:
    files = [tmp_path / f"00000{i}.sst" for i in range(3)] + [tmp_path / "OPTIONS-000007"]
    for i, path in enumerate(files):
        path.write_bytes(b"x" * i)
    stats = [path.stat() for path in files]
    known = KnownDigests(limit=2)
    for path, stat in zip(files, stats, strict=True):
        known.remember(path, stat, path.name)
        known.get(files[0], stats[0])  # used again after each: the oldest use is files[1]
    assert [known.get(p, s) for p, s in zip(files, stats, strict=True)] == [
        files[0].name, None, files[2].name, None
    ]  # fmt: skip


def _sent_digests(body: bytes) -> dict[str, str]:
    """{file name: SHA-256} as the manifest at the end of a tar stream gives them."""
    manifest = list(members(body))[-1]
    raw = body[manifest.offset_data : manifest.offset_data + manifest.size]
    return {f.name: f.sha256 for f in Manifest.parse(raw).files}


def _rot(path: Path, offset: int) -> None:
    """Flip a bit of `path` at `offset`, keeping its inode, size and modification time."""
    stat = path.stat()
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x01]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files an install began to write into its staging directory."""
    names: list[str] = []
    add = Staging.add

    def recorded(self: Staging, name: str, data: IO[bytes]) -> None:
        names.append(name)
        add(self, name, data)

    monkeypatch.setattr(Staging, "add", recorded)
    return names


def test_sparse_link_and_device_entries_are_refused_before_a_byte_is_written(
    tmp_path: Path, peer: Peer, caplog: pytest.LogCaptureFixture, written: list[str]
) -> None:
    sparse_01 = {"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.name": "db/s",
                 "GNU.sparse.map": f"{1 << 30},0", "GNU.sparse.realsize": str(1 << 30)}  # fmt: skip
    sparse_10 = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "db/s",
                 "GNU.sparse.realsize": str(1 << 30)}  # fmt: skip
    cases = {
        "sparse (GNU)": (gnu_sparse("db/000001.sst", 64 << 20), "is not a regular file"),
        "sparse (PAX 0.1)": (tar_of(entry("db/s", size=0, pax=sparse_01)), "not a regular"),
        # Its map would be read from the data: a number of entries, then no end of line.
        "sparse (PAX 1.0)": (
            tar_of(entry("db/s", size=0, pax=sparse_10))[:-1024] + b"99999999\n" + b"1" * (4 << 20),
            "a sparse file",
        ),
        "character device": (tar_of(entry("db/CURRENT", tarfile.CHRTYPE, 0)), "not a regular"),
        "fifo": (tar_of(entry("db/CURRENT", tarfile.FIFOTYPE, 0)), "not a regular"),
        "directory": (tar_of(entry("db/sub", tarfile.DIRTYPE, 0)), "not a regular"),
    }
    for label, (crafted, why) in cases.items():
        peer.serve(crafted)
        warning = _refused(peer.url(), tmp_path / "b", caplog)
        assert why in warning and written == [], (label, warning, written)


def test_a_huge_extended_header_is_refused_before_it_is_read(
    tmp_path: Path, peer: Peer, caplog: pytest.LogCaptureFixture
) -> None:
    """tarfile reads an extended header whole into memory: at most a chunk of it arrives."""
    for kind in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME):
        peer.serve(huge_header(kind, declared=96 << 20, sent=8 << 20), pieces=8)
        received: list[int] = [0]
        caplog.clear()
        assert not snapshot.install(peer.url(), tmp_path / "b", progress=received.append)
        assert f"an extended header of {96 << 20} bytes" in caplog.text, kind
        assert max(received) <= 2 << 20, (kind, max(received))
        assert [p.name for p in (tmp_path / "b").iterdir()] == []


def test_an_extended_header_of_a_few_names_still_installs(
    tmp_path: Path, body: bytes, peer: Peer
) -> None:
    """The refusal above is of size, not kind: PAX headers of a few KiB pass."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in _entries(body):
            member.pax_headers = {"comment": "x" * 4000}  # a 4,014-byte header
            tar.addfile(member, io.BytesIO(data))
    last = list(members(out.getvalue()))[-1]
    end = -(-(last.offset_data + last.size) // 512) * 512 + 1024  # its data's end, padded
    peer.serve(out.getvalue()[:end])  # tarfile pads to 10 KiB: a snapshot may not
    assert snapshot.install(peer.url(), tmp_path / "b")
    assert _installed_keys(tmp_path / "b") == 3_000


def _entries(body: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(body), mode="r|") as tar:
        return [(m, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]


def test_a_tar_of_too_many_entries_is_refused(
    tmp_path: Path, peer: Peer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetch, "_MAX_FILES", 100)
    peer.serve(tar_of(*(entry(f"db/{i:06d}.sst", size=0) for i in range(101))))
    assert "more than 100 entries" in _refused(peer.url(), tmp_path / "b", caplog)


def test_a_download_past_what_the_disk_can_spare_stops_and_leaves_nothing(
    tmp_path: Path, body: bytes, peer: Peer, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    total = 1 << 40
    spare = 1 << 20  # beyond the twentieth of the disk kept free
    usage = SimpleNamespace(total=total, free=total // 20 + spare)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    peer.serve(body, pieces=3)
    assert len(body) > spare
    warning = _refused(peer.url(), tmp_path / "b", caplog)
    assert f"larger than the {spare} bytes the file system can spare" in warning


def test_a_snapshot_must_name_the_topic_and_topic_id_its_manifest_claims(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nameless = Storage(tmp_path / "nameless")
    try:
        nameless.initialise("topic-a", None, 1)  # no topic id: the plan could not compare it
    finally:
        nameless.close()
    snapshot.create(tmp_path / "nameless", tmp_path / "no-id")
    checkpoint_of_a_store(tmp_path)
    snapshot.create(tmp_path / "a", tmp_path / "claims")
    manifest = json.loads((tmp_path / "claims" / MANIFEST).read_bytes())
    shutil.copytree(tmp_path / "claims", tmp_path / "ahead")
    (tmp_path / "claims" / MANIFEST).write_text(json.dumps({**manifest, "topic": "topic-b"}))
    (tmp_path / "ahead" / MANIFEST).write_text(json.dumps({**manifest, "offsets": {"0": 9}}))
    cases = {
        "no-id": "names no topic or no topic id",
        "claims": "holds topic 'topic-a' (id id-of-topic-a), its manifest says 'topic-b'",
        "ahead": "is at offsets {0: 3}, its manifest says {0: 9}",
    }
    for source, why in cases.items():
        assert why in _refused(tmp_path / source, tmp_path / "b", caplog), source


def test_the_peer_token_is_sent_to_peers_rather_than_the_server_token(
    tmp_path: Path, body: bytes, peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fetch.TOKEN_ENV, "this-server")
    monkeypatch.setenv(fetch.PEER_TOKEN_ENV, "the-fleet")
    peer.serve(body)
    assert snapshot.install(peer.url(), tmp_path / "b")
    assert [headers.get("Authorization") for _, headers in peer.requests] == ["Bearer the-fleet"]


def test_the_server_token_never_goes_to_a_peer(
    tmp_path: Path, body: bytes, peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fetch.TOKEN_ENV, "this-server")
    monkeypatch.delenv(fetch.PEER_TOKEN_ENV, raising=False)
    peer.serve(body)
    assert snapshot.install(peer.url(), tmp_path / "b")
    assert [headers.get("Authorization") for _, headers in peer.requests] == [None]


def test_plain_http_to_another_host_is_refused_unless_allowed(
    tmp_path: Path, peer: Peer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = "http://192.0.2.1:9/v1/snapshot"  # TEST-NET-1: nothing answers there
    monkeypatch.setenv(fetch.PEER_TOKEN_ENV, "s3cret")
    began = time.monotonic()
    assert fetch.INSECURE_ENV in _refused(elsewhere, tmp_path / "b", caplog)
    assert time.monotonic() - began < 0.5  # refused before any connection was tried
    peer.routes["/v1/snapshot"] = Route(redirect=elsewhere)
    assert fetch.INSECURE_ENV in _refused(peer.url(), tmp_path / "b", caplog)
    monkeypatch.setenv(fetch.INSECURE_ENV, "1")
    caplog.clear()
    assert not snapshot.install(elsewhere, tmp_path / "b", timeout=0.5)  # tried, timed out
    assert "to another host" not in caplog.text and "over plain http" in caplog.text
