"""Installing a peer's snapshot against a real broker: a cut, corrupted or hostile snapshot is
refused and the store restores exactly from Kafka; kill -9 at any moment of an install leaves
nothing a restart trips on; two processes booting one empty path never both install.

The peer is a small HTTP server (tests/snapshot_peer.py) serving the bytes GET /v1/snapshot
sends for a real checkpoint, or crafted ones, slowly when the test needs time to act."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from globalstore import GlobalStore
from tests.integration.store_support import produce
from tests.integration.test_serve_snapshot import _content, _expected, _Starts
from tests.integration.test_store_crash import Child
from tests.snapshot_peer import Peer, Route, hostile_tars, members, snapshot_bytes
from tests.waiting import eventually

Batch = list[tuple[str, object]]


def _records(count: int, seed: int) -> Batch:
    """`count` writes over 3,000 keys, one in ten a tombstone; values do not compress, so
    the table files are large enough to cut in the middle."""
    rng = random.Random(seed)
    out: Batch = []
    for _ in range(count):
        key = f"k{rng.randrange(3_000):05d}"
        out.append((key, None if rng.random() < 0.1 else {"v": rng.randbytes(120).hex()}))
    return out


def _peer_snapshot(bootstrap: str, topic: str, tmp_path: Path) -> bytes:
    """What a peer that restored the topic sends for GET /v1/snapshot now."""
    with GlobalStore(topic, bootstrap, tmp_path / "peer").start(timeout=60) as peer_store:
        peer_store.checkpoint(tmp_path / "peer-checkpoint")
    return snapshot_bytes(tmp_path / "peer-checkpoint")


def _boot(bootstrap: str, topic: str, path: Path, url: str) -> tuple[dict[str, object], _Starts]:
    """Start a store at `path` from the snapshot at `url`: its content, and where it began."""
    starts = _Starts()
    store = GlobalStore(topic, bootstrap, path, listeners=[starts], bootstrap_from=url)
    with store.start(timeout=60):
        return _content(store), starts


def test_a_cut_corrupted_or_hostile_snapshot_is_refused_and_the_store_restores_from_kafka(
    kafka_bootstrap: str, make_topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=2)
    records = _records(6_000, seed=1)
    produce(kafka_bootstrap, topic, records)
    body = _peer_snapshot(kafka_bootstrap, topic, tmp_path)
    entries = list(members(body))
    manifest, biggest = entries[-1], max(entries[:-1], key=lambda m: m.size)
    assert biggest.size > 100_000, [(m.name, m.size) for m in entries]
    flipped = bytearray(body)
    flipped[biggest.offset_data + biggest.size // 3] ^= 0x40
    cases = {
        "cut at a file boundary": (body[: manifest.offset], "ends before its manifest"),
        "cut in a file": (body[: biggest.offset_data + biggest.size // 2], "end of data"),
        "a flipped byte": (bytes(flipped), "does not match its SHA-256"),
        **{label: (tar, "refused") for label, tar in hostile_tars().items()},
    }
    caplog.set_level(logging.INFO, logger="globalstore")
    with Peer() as peer:
        peer.serve(body)
        content, starts = _boot(kafka_bootstrap, topic, tmp_path / "whole", peer.url())
        assert content == _expected(records) and starts.to_read == [0], "the whole one fits"
        for label, (crafted, why) in cases.items():
            peer.serve(crafted, pieces=4)
            caplog.clear()
            content, starts = _boot(kafka_bootstrap, topic, tmp_path / label, peer.url())
            assert content == _expected(records), label
            assert starts.to_read == [len(records)], (label, starts.to_read)  # all of Kafka
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert any(why in w and "refused" in w for w in warnings), (label, warnings)
            assert "installed snapshot" not in caplog.text, label
            assert not list((tmp_path / label).glob("snapshot-*")), label


# Where each kill lands, by the body bytes the peer had sent: in the first file, halfway,
# with every file staged but the end-of-archive marker still to come, and after the
# install, while the store catches up from the snapshot's offsets.
KILL_MOMENTS = ("first piece", "halfway", "all but the end marker", "catching up")


def test_kill_9_during_an_install_then_a_restart_is_exact(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    first, later = _records(6_000, seed=2), _records(20_000, seed=3)
    produce(kafka_bootstrap, topic, first)
    body = _peer_snapshot(kafka_bootstrap, topic, tmp_path)
    produce(kafka_bootstrap, topic, later)  # the child catches up over these after installing
    data, marker = body[:-1024], body[-1024:]
    size = -(-len(data) // 8)
    pieces = [data[i : i + size] for i in range(0, len(data), size)] + [marker]
    with Peer() as peer:
        peer.routes["/slow"] = Route(pieces, pause=0.6)
        peer.serve(body, path="/fast")
        thresholds = {
            "first piece": 1, "halfway": len(data) // 2, "all but the end marker": len(data)
        }  # fmt: skip
        for n, moment in enumerate(KILL_MOMENTS):
            path = tmp_path / f"store-{n}"
            peer.sent = 0
            child = Child(
                kafka_bootstrap, topic, path, tmp_path / f"child-{n}.err", peer.url("/slow")
            )
            if moment == "catching up":
                child.wait_for("batch", timeout=60)
            else:
                wanted = thresholds[moment]
                eventually(lambda: peer.sent >= wanted, 60, lambda: peer.sent, 0.002)  # noqa: B023
            phase = child.kill()
            staging = list(path.glob("snapshot-*"))
            if moment == "catching up":
                assert phase == "mid-restore" and not staging, (phase, staging)
            else:
                assert phase == "opening" and len(staging) == 1, (moment, phase, staging)
            content, _ = _boot(kafka_bootstrap, topic, path, peer.url("/fast"))
            assert content == _expected(first, later), moment
            assert not list(path.glob("snapshot-*")), f"{moment}: staging left behind"


def test_two_processes_booting_one_empty_path_never_both_install(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    records = _records(6_000, seed=4)
    produce(kafka_bootstrap, topic, records)
    body = _peer_snapshot(kafka_bootstrap, topic, tmp_path)
    path = tmp_path / "store"
    with Peer() as peer:
        peer.serve(body, pieces=8, pause=0.5)  # 4 s: the two starts surely overlap
        children = [
            Child(kafka_bootstrap, topic, path, tmp_path / f"child-{n}.err", peer.url())
            for n in range(2)
        ]
        eventually(
            lambda: any(c.proc.poll() is not None for c in children),
            60,
            lambda: [(c.proc.poll(), c.lines) for c in children],
        )
        loser = next(c for c in children if c.proc.poll() is not None)
        winner = next(c for c in children if c is not loser)
        assert loser.proc.returncode == 1
        assert "StoreLocked" in loser.stderr.read_text(), loser.stderr.read_text()[-2000:]
        winner.wait_for("following", timeout=90)
        winner.kill()
        assert len(peer.requests) == 1, "only the lock's holder fetched the snapshot"
    content, starts = _boot(kafka_bootstrap, topic, path, peer.url())
    assert content == _expected(records)
    assert starts.to_read == [0], "it resumed from what the winner installed"
