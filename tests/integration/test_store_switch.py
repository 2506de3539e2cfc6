"""A topic-to-topic switch under concurrent queries: every answer comes whole from v1 or whole
from v2, never empty, partial, failed or mixed, and once a reader has seen v2 it never sees v1
again. The old directory is removed on request, and a switch killed half-way leaves the
old store whole and completes on restart."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from globalstore import GlobalStore, ReadOnlyStore, SwitchingStore
from globalstore.server import ServedStore
from tests.integration.serve_support import running_server, wait_ready
from tests.integration.store_support import produce

N = 2_000


def _generation(bootstrap: str, topic: str, gen: int) -> None:
    produce(bootstrap, topic, [(f"k{i:05d}", {"i": i, "gen": gen}) for i in range(N)])


class Reader(threading.Thread):
    """Point gets, multi-gets, scans and Arrow exports until stopped; records every answer's
    generation."""

    def __init__(self, store: SwitchingStore, seed: int) -> None:
        super().__init__(daemon=True)
        self.store, self.rng = store, random.Random(seed)
        self.stop_event = threading.Event()
        self.seen: list[int] = []  # generation of each answer, in order
        self.wrong: list[str] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._one()
            except Exception as exc:
                self.wrong.append(f"{type(exc).__name__}: {exc}")

    def _one(self) -> None:
        kind = self.rng.randrange(4)
        if kind == 0:
            i = self.rng.randrange(N)
            value = self.store.get(f"k{i:05d}")
            answers = [] if value is None else [value]
            expected = 1
        elif kind == 1:
            keys = [f"k{self.rng.randrange(N):05d}" for _ in range(20)]
            answers = list(self.store.get_many(keys).values())
            expected = len(set(keys))
        elif kind == 2:
            answers = [value for _, value in self.store.items(prefix="k00")]
            expected = 1_000
        else:  # an export, read batch by batch while the switch may happen
            table = self.store.to_arrow(prefix="k00", batch_rows=100).read_all()
            answers = [orjson.loads(text) for text in table.column("value").to_pylist()]
            expected = 1_000
        gens = {value["gen"] for value in answers}
        if len(answers) != expected or len(gens) != 1:
            self.wrong.append(f"{len(answers)} answers of {expected}, generations {gens}")
            return
        self.seen.append(gens.pop())


def _two_generations(kafka_bootstrap: str, make_topic: Callable[..., str]) -> tuple[str, str]:
    """A v1 topic (2 partitions) and a v2 topic (3 partitions), each holding its generation."""
    v1_topic, v2_topic = make_topic(partitions=2), make_topic(partitions=3)
    _generation(kafka_bootstrap, v1_topic, 1)
    _generation(kafka_bootstrap, v2_topic, 2)
    return v1_topic, v2_topic


def test_queries_move_from_v1_to_v2_at_one_instant(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    v1_topic, v2_topic = _two_generations(kafka_bootstrap, make_topic)
    v1 = GlobalStore(v1_topic, kafka_bootstrap, tmp_path / "v1").start(timeout=60)
    with SwitchingStore(v1) as store:
        readers = [Reader(store, seed) for seed in range(3)]
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 30
        while not all(reader.seen for reader in readers):
            assert time.monotonic() < deadline, "readers did not answer from v1"
            time.sleep(0.01)
        v2 = GlobalStore(v2_topic, kafka_bootstrap, tmp_path / "v2")
        assert store.switch_to(v2, timeout=60, remove_old=True)
        assert store.active is v2 and not (tmp_path / "v1").exists()
        counts = [len(reader.seen) for reader in readers]
        while any(len(r.seen) < c + 20 for r, c in zip(readers, counts, strict=True)):
            assert time.monotonic() < deadline + 30, "readers stopped answering after the switch"
            time.sleep(0.01)
        for reader in readers:
            reader.stop_event.set()
            reader.join()
        for reader in readers:
            assert not reader.wrong, reader.wrong[:5]
            first_v2 = reader.seen.index(2)
            assert set(reader.seen[:first_v2]) == {1} and set(reader.seen[first_v2:]) == {2}
        assert store.count() == N and store.status().topic == v2_topic


def test_a_switch_waits_for_the_new_store_and_gives_up_on_timeout(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    v1_topic = make_topic(partitions=1)
    _generation(kafka_bootstrap, v1_topic, 1)
    v1 = GlobalStore(v1_topic, kafka_bootstrap, tmp_path / "v1").start(timeout=60)
    with SwitchingStore(v1) as store:
        # A new store that cannot reach a broker never restores: no switch, v1 still answers.
        unreachable = GlobalStore(v1_topic, "127.0.0.1:1", tmp_path / "v2")
        try:
            assert store.switch_to(unreachable, timeout=1.0) is False
        finally:
            unreachable.close()
        assert store.active is v1 and store["k00001"] == {"i": 1, "gen": 1}


_SWITCH_CHILD = """
import sys, threading
from globalstore import GlobalStore, StoreConfig, StoreListener, SwitchingStore

class Held(StoreListener):  # v2's restore stops after its first batch until killed
    def on_batch_restored(self, topic, positions, records):
        print("restoring", flush=True)
        threading.Event().wait()

v1_topic, v2_topic, bootstrap, root = sys.argv[1:5]
v1 = GlobalStore(v1_topic, bootstrap, root + "/v1").start(timeout=60)
v2_config = StoreConfig(v2_topic, bootstrap, root + "/v2", restore_batch_size=100)
SwitchingStore(v1).switch_to(
    GlobalStore.from_config(v2_config, listeners=[Held()]), timeout=120, remove_old=True
)
print("switched", flush=True)
"""


def test_a_switch_killed_while_v2_restores_leaves_v1_whole_and_completes_on_restart(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    v1_topic, v2_topic = _two_generations(kafka_bootstrap, make_topic)
    args = [v1_topic, v2_topic, kafka_bootstrap, str(tmp_path)]
    child = subprocess.Popen(
        [sys.executable, "-c", _SWITCH_CHILD, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "restoring"
    finally:
        child.kill()  # kill -9 in the middle of v2's restore
        child.wait(timeout=30)

    with ReadOnlyStore(tmp_path / "v1") as old:  # the store queries answered from is whole
        assert {value["gen"] for value in old.values()} == {1} and old.count() == N

    v1 = GlobalStore(v1_topic, kafka_bootstrap, tmp_path / "v1").start(timeout=60)
    with SwitchingStore(v1) as store:
        v2 = GlobalStore(v2_topic, kafka_bootstrap, tmp_path / "v2")
        assert store.switch_to(v2, timeout=60, remove_old=True)
        expected = {f"k{i:05d}": {"i": i, "gen": 2} for i in range(N)}
        assert dict(store.items()) == expected  # nothing lost, nothing twice, no v1 left
        assert store.count() == N and not (tmp_path / "v1").exists()


def test_the_server_serves_a_switching_store_across_its_switch(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    v1_topic, v2_topic = _two_generations(kafka_bootstrap, make_topic)
    store = SwitchingStore(GlobalStore(v1_topic, kafka_bootstrap, tmp_path / "v1"))
    with running_server(ServedStore.of(store)) as client:  # the server starts v1
        wait_ready(client)
        assert client.get("/v1/keys/k00007").json()["value"] == {"i": 7, "gen": 1}
        assert client.get("/v1/status").json()["topic"] == v1_topic
        v2 = GlobalStore(v2_topic, kafka_bootstrap, tmp_path / "v2")
        assert store.switch_to(v2, timeout=60, remove_old=True)
        assert client.get("/v1/keys/k00007").json()["value"] == {"i": 7, "gen": 2}
        assert client.get("/v1/count").json()["count"] == N
        page = client.get("/v1/keys", params={"prefix": "k0000", "limit": 3}).json()
        assert [item["value"]["gen"] for item in page["items"]] == [2, 2, 2]
        assert client.get("/v1/status").json()["topic"] == v2_topic
    assert not (tmp_path / "v1").exists()
