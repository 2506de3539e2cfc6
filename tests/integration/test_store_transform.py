"""transform= on ingest against a real broker and real RocksDB: after a restore and while
following, the store equals a model folded from the same records by the same transform; a
transform that raises is counted and logged and loses nothing else; a changed
transform_version rebuilds (from the topic, or from a snapshot of the same version); kill -9
during a restore with a transform, then restart, is exact."""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from globalstore import GlobalStore, StoreListener
from globalstore.cli import main
from globalstore.codec import decode
from globalstore.follow.topic import end_offsets
from globalstore.server import ServedStore
from globalstore.snapshots import archive as snapshot
from globalstore.storage import Storage
from tests.integration.serve_support import running_server, wait_ready
from tests.integration.store_support import Record, produce
from tests.integration.test_store_crash import RESTORE_PAUSE, Child, TopicLog, warnings_logged

Transform = Callable[[str, Any], Any]
Model = dict[str, Any]


def active_orders(key: str, order: Any) -> Any:
    """Keeps the active orders (about half), projected to two of their fields."""
    if not order["active"]:
        return None
    return {"courier": order["courier"], "total": order["total"]}


def by_courier(key: str, order: Any) -> Any:
    """Another transform of the same records: every order, its courier only."""
    return order["courier"]


def fragile(key: str, order: Any) -> Any:
    if order.get("bad"):
        raise ValueError(f"cannot shape {key}")
    return order["total"]


def fold(records: Iterable[Record], fn: Transform, model: Model | None = None) -> Model:
    """What a store with transform `fn` holds after `records`, in their order (per key)."""
    out = {} if model is None else model
    for key, value in records:
        if value is None:
            out.pop(key, None)
            continue
        try:
            shaped = fn(key, value)
        except Exception:
            continue  # kept as it was
        if shaped is None:
            out.pop(key, None)
        else:
            out[key] = shaped
    return out


def orders(rng: random.Random, n: int, keys: int, start: int = 0) -> list[Record]:
    """Overwrites and tombstones of `keys` orders: about half active at any time."""
    out: list[Record] = []
    for i in range(start, start + n):
        key = f"o{rng.randrange(keys):04d}"
        if rng.random() < 0.1:
            out.append((key, None))
            continue
        order = {
            "active": rng.random() < 0.5,
            "courier": f"c-{rng.randrange(20)}",
            "total": i,
            "address": "x" * rng.randrange(10, 60),
            "items": [i, i + 1],
        }
        out.append((key, order))
    return out


class Starts(StoreListener):
    """The offsets each restore started from."""

    def __init__(self) -> None:
        self.starts: list[dict[int, int]] = []

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        self.starts.append(dict(start_offsets))


def test_restore_and_follow_store_what_the_transform_returns(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    rng = random.Random(25)
    topic = make_topic(partitions=3)
    records = orders(rng, 6_000, 800)
    produce(kafka_bootstrap, topic, records)
    model = fold(records, active_orders)
    assert 250 < len(model) < 550  # about half the live keys are kept
    # A bulk restore (recounted after ready), as a large topic gets.
    with GlobalStore(
        topic, kafka_bootstrap, tmp_path / "s", transform=active_orders, bulk_restore_threshold=100
    ) as store:
        assert dict(store.items()) == model
        assert store.count() == len(model)
        assert store.get_entry(next(iter(model))) is not None

        # Following: a kept key that turns inactive is deleted, a dropped one that turns
        # active appears, a tombstone deletes, whatever comes in between.
        kept = sorted(model)[0]
        dropped = next(k for k, v in records[::-1] if v is not None and k not in model)
        turns = [
            (kept, {"active": False, "courier": "c-1", "total": 1, "address": "", "items": []}),
            (dropped, {"active": True, "courier": "c-2", "total": 2, "address": "", "items": []}),
        ]
        later = [*turns, *orders(rng, 2_000, 800, start=6_000), (sorted(model)[1], None)]
        written = produce(kafka_bootstrap, topic, later)
        assert store.wait_for(written, timeout=30)
        model = fold(later, active_orders, model)
        assert dict(store.items()) == model and store.count() == len(model)
        status = store.status()
        assert status.transform_failures == 0 and status.rebuild_reason is None


def test_a_transform_that_raises_is_counted_and_logged_and_keeps_the_key(
    kafka_bootstrap: str, make_topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=1)
    good = [(f"k{i:03d}", {"total": i}) for i in range(200)]
    # Offsets 200 and 201: a kept key's next record raises; a new key's only record raises.
    records = [*good, ("k007", {"total": -7, "bad": True}), ("new", {"total": 0, "bad": True})]
    produce(kafka_bootstrap, topic, records, partition=0)
    model = fold(records, fragile)
    assert model["k007"] == 7 and "new" not in model
    served = ServedStore(
        lambda listener: GlobalStore(
            topic, kafka_bootstrap, tmp_path / "s", listeners=[listener], transform=fragile
        ),
        start_timeout=60,
    )
    with caplog.at_level(logging.WARNING, logger="globalstore"), running_server(served) as client:
        wait_ready(client)
        store = served.store
        assert dict(store.items()) == model and store.count() == 200
        assert store.status().transform_failures == 2
        assert store.position() == {0: 202}  # the records it raised on are applied too
        # While following: one more, and the good records around it are kept.
        later = [("k001", {"total": -1, "bad": True}), ("k002", {"total": 2002})]
        produce(kafka_bootstrap, topic, later, partition=0)
        assert store.wait_for({0: 204}, timeout=30)
        assert store["k001"] == 1 and store["k002"] == 2002
        assert client.get("/v1/status").json()["transform_failures"] == 3
        assert "globalstore_transform_failures_total 3.0" in client.get("/metrics").text
    logged = [r.getMessage() for r in caplog.records if r.name == "globalstore.shaping.transform"]
    assert [line.split(" (")[0] for line in logged] == [
        f"transform raised on key 'k007' of {topic} partition 0 offset 200",
        f"transform raised on key 'new' of {topic} partition 0 offset 201",
        f"transform raised on key 'k001' of {topic} partition 0 offset 202",
    ]
    assert "ValueError: cannot shape k007" in logged[0]


def test_a_changed_transform_version_rebuilds_from_the_topic_or_a_matching_snapshot(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    records = orders(random.Random(7), 3_000, 500)
    produce(kafka_bootstrap, topic, records)
    plain = fold(records, lambda key, value: value)
    path = tmp_path / "s"

    def opened(**settings: Any) -> tuple[Model, str | None, list[dict[int, int]]]:
        starts = Starts()
        with GlobalStore(topic, kafka_bootstrap, path, listeners=[starts], **settings) as store:
            return dict(store.items()), store.status().rebuild_reason, starts.starts

    ends = end_offsets(kafka_bootstrap, topic)
    # Written with version 1; opened again with it, it resumes at the end it reached.
    assert opened(transform=active_orders)[:2] == (fold(records, active_orders), None)
    assert opened(transform=active_orders) == (fold(records, active_orders), None, [ends])
    items, reason, starts = opened(transform=by_courier, transform_version=2)
    assert items == fold(records, by_courier) and starts == [{0: 0, 1: 0}]
    assert reason == "store was written with transform version 1, not 2"
    items, reason, _ = opened()
    assert items == plain
    assert reason == "store was written with transform version 2; no transform is given now"
    items, reason, _ = opened(transform=active_orders)
    assert items == fold(records, active_orders)
    assert reason == "store was written without a transform; transform version 1 is given now"

    # A snapshot of the version-1 store: a new store of version 1 starts from it, one of
    # version 2 rebuilds from the topic.
    snapshot.create(path, tmp_path / "snap")
    for version, transform, expected_start in ((1, active_orders, ends), (2, by_courier, None)):
        fresh = tmp_path / f"from-snapshot-{version}"
        starts = Starts()
        with GlobalStore(
            topic, kafka_bootstrap, fresh, listeners=[starts], transform=transform,
            transform_version=version, bootstrap_from=tmp_path / "snap",
        ) as store:  # fmt: skip
            assert dict(store.items()) == fold(records, transform)
            if expected_start is None:
                assert starts.starts == [{0: 0, 1: 0}]
                assert store.status().rebuild_reason == (
                    "store was written with transform version 1, not 2"
                )
            else:
                assert starts.starts == [expected_start]
                assert store.status().rebuild_reason is None


def test_the_store_commands_take_the_transform_by_name(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    records = orders(random.Random(3), 500, 100)
    produce(kafka_bootstrap, topic, records)
    store = ["--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--path", str(tmp_path)]
    shaped = ["--transform", f"{__name__}:by_courier", "--transform-version", "2"]
    result = CliRunner().invoke(main, ["scan", *store, *shaped])
    assert result.exit_code == 0, result.output
    scanned = {line["key"]: line["value"] for line in map(orjson.loads, result.stdout.splitlines())}
    assert scanned == fold(records, by_courier)
    wrong = CliRunner().invoke(main, ["count", *store, "--transform", f"{__name__}:nope"])
    assert wrong.exit_code == 2 and "--transform" in wrong.output and "nope" in wrong.output


PARTITIONS = 4
PRELOAD = 60_000
TRANSFORM = f"{__name__}:active_orders"


def _check_offline(path: Path, oracle: TopicLog) -> dict[int, int]:
    """What a crash left on disk equals the transform of the topic up to the stored offsets."""
    with warnings_logged() as warned:
        storage = Storage(path)
        try:
            meta = storage.read_meta()
            data = {k.decode(): decode(raw, k, "t") for k, raw in storage.scan(None, None, False)}
        finally:
            storage.close()
    assert warned == [], f"opening the crashed store logged warnings: {warned}"
    assert meta.transform_version == 1
    oracle.read_up_to(meta.offsets)
    expected: Model = {}
    for p in range(PARTITIONS):
        records = oracle.records[p][: meta.offsets.get(p, 0)]
        fold(((k.decode(), v and orjson.loads(v)) for k, v in records), active_orders, expected)
    assert data == expected, f"at stored offsets {meta.offsets}"
    return meta.offsets


def test_kill_9_during_a_restore_with_a_transform_then_restart_is_exact(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS, config={"min.compaction.lag.ms": "3600000"})
    produce(kafka_bootstrap, topic, orders(random.Random(9), PRELOAD, 20_000))
    oracle = TopicLog(kafka_bootstrap, topic)
    path = tmp_path / "store"
    rng = random.Random(11)
    # Two kills of a restore that logs every batch (the second resumes what the first left),
    # then one of a bulk restore from scratch (unlogged: what it wrote since the last flush
    # is lost with its offsets).
    progress = []
    for n, threshold in enumerate((10**9, 10**9, 1)):
        if n == 2:
            shutil.rmtree(path)
        args = ("", TRANSFORM, str(threshold))
        child = Child(kafka_bootstrap, topic, path, tmp_path / f"child-{n}.err", *args)
        child.wait_for("batch")  # partial data is on disk now
        time.sleep(rng.uniform(0.0, 10 * RESTORE_PAUSE))
        assert child.kill() == "mid-restore"
        progress.append(sum(_check_offline(path, oracle).values()))
    print(f"offsets on disk after each kill: {progress}")
    assert 0 < progress[0] < progress[1] < PRELOAD, progress

    ends = end_offsets(kafka_bootstrap, topic)
    oracle.read_up_to(ends)
    expected: Model = {}
    for p in range(PARTITIONS):
        records = oracle.records[p]
        fold(((k.decode(), v and orjson.loads(v)) for k, v in records), active_orders, expected)
    with GlobalStore(topic, kafka_bootstrap, path, transform=active_orders) as store:
        assert store.status().rebuild_reason is None  # resumed where the crash left it
        assert store.position() == ends
        assert dict(store.items()) == expected and store.count() == len(expected)
    oracle.consumer.close()
