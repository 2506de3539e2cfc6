"""What a store with history must answer as of a time, from what was produced alone: a
workload produced to a real topic (values, tombstones, timestamps that go backwards in a
partition, a key moved to another partition, committed and aborted transactions), an
independent replay of the records that were committed, by the rule docs/store.md states,
and the checks of a store's reads as of many times against it (get, get_many, items, keys,
find, find_matches, find_count, a view).

The rule, as the replay applies it: in each partition, of a key's records whose timestamp
is <= t, the last produced; of those (one per partition), the one with the greatest
timestamp, and on a tie the greater partition; a tombstone reads absent.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Any

import orjson
from confluent_kafka import Producer

from globalstore import HistoryUnavailable
from tests.integration.store_support import producer

HOUR = 3600.0
COURIERS = ["c0", "c1", "c2", "c3"]


def by_courier_fn(key: str, value: Any) -> str | None:
    """A function index: the courier of a value (the same as the declared "courier")."""
    courier = value.get("courier")
    return courier if isinstance(courier, str) else None


# A declared index (its field recorded in the store: every face reads it as of a time) and
# a function index (only where its function is: GlobalStore with the thread follower).
INDEXES: dict[str, Any] = {"by_courier": "courier", "by_courier_fn": by_courier_fn}


@dataclasses.dataclass(frozen=True)
class Produced:
    """A record as produced: key, value (None: a tombstone), partition, timestamp (ms)."""

    key: str
    value: Any
    partition: int
    ts: int


@dataclasses.dataclass
class Replay:
    """The committed records of a topic, in the order each partition holds them."""

    records: list[Produced] = dataclasses.field(default_factory=list)

    def value(self, key: str, t_ms: int) -> Any:
        """The value of `key` as of `t_ms` by the rule; None if absent then."""
        last: dict[int, Produced] = {}
        for r in self.records:
            if r.key == key and r.ts <= t_ms:
                last[r.partition] = r
        if not last:
            return None
        return max(last.values(), key=lambda r: (r.ts, r.partition)).value

    def state(self, t_ms: int) -> dict[str, Any]:
        """{key: value} of every key present as of `t_ms`, in key order."""
        keys = sorted({r.key for r in self.records})
        return {k: v for k in keys if (v := self.value(k, t_ms)) is not None}

    def matches(self, t_ms: int) -> list[tuple[str, str, Any]]:
        """(courier, key, value) as of `t_ms`, in the order an index of couriers gives."""
        return sorted((v["courier"], k, v) for k, v in self.state(t_ms).items() if "courier" in v)

    def times(self, rng: random.Random, lowest_ms: int, n: int) -> list[int]:
        """`n` times (ms) from `lowest_ms` to just past the last record: random ones, and
        the instants around some records' own timestamps."""
        top = max(r.ts for r in self.records) + 50
        edges = [r.ts + d for r in rng.sample(self.records, min(8, len(self.records)))
                 for d in (-1, 0)]  # fmt: skip
        picked = [rng.randint(lowest_ms, top) for _ in range(n)] + edges + [top]
        return sorted(t for t in picked if t >= lowest_ms)


def _value(rng: random.Random, i: int) -> Any:
    value: dict[str, Any] = {"n": i}
    if rng.random() < 0.85:
        value["courier"] = rng.choice(COURIERS)
    return value


def produce_workload(
    bootstrap: str,
    topic: str,
    partitions: int,
    replay: Replay,
    rng: random.Random,
    base_ms: int,
    n: int = 120,
) -> None:
    """Produce `n` records of 16 keys from timestamp `base_ms` on, each acknowledged before
    the next, and add the committed ones to `replay`: a key's partition is its home
    (k03 moves to the next partition halfway), a fifth are tombstones, some timestamps go
    back 45 ms; then a committed and an aborted transaction of 6 records each."""
    plain = producer(bootstrap)
    for i in range(n):
        k = rng.randrange(16)
        partition = (k + (k == 3 and i >= n // 2)) % partitions
        ts = base_ms + 10 * i - (45 if rng.random() < 0.1 else 0)
        value = None if rng.random() < 0.2 else _value(rng, i)
        _send(plain, topic, Produced(f"k{k:02d}", value, partition, ts))
        replay.records.append(Produced(f"k{k:02d}", value, partition, ts))
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"h-{uuid.uuid4().hex}"})
    tx.init_transactions(30)
    ts = base_ms + 10 * n
    for commit in (True, False):
        tx.begin_transaction()
        sent = []
        for j in range(6):
            k = rng.randrange(16)
            record = Produced(f"k{k:02d}", _value(rng, n + j), k % partitions, ts + 10 * j)
            tx.produce(topic, key=record.key.encode(), value=orjson.dumps(record.value),
                       partition=record.partition, timestamp=record.ts)  # fmt: skip
            sent.append(record)
        # Sent before the transaction ends: an abort racing its own records' first send
        # is refused by a Kafka 4 broker (INVALID_TXN_STATE), a fatal producer error.
        assert tx.flush(30) == 0
        if commit:
            tx.commit_transaction(30)
            replay.records.extend(sent)
        else:
            tx.abort_transaction(30)
        ts += 100


def _send(p: Producer, topic: str, r: Produced) -> None:
    raw = None if r.value is None else orjson.dumps(r.value)
    p.produce(topic, key=r.key.encode(), value=raw, partition=r.partition, timestamp=r.ts)
    assert p.flush(30) == 0


def check_as_of(store: Any, replay: Replay, times: list[int], functions: bool = False) -> None:
    """Every read of `store` as of each of `times` (ms) equals the replay; `functions`: its
    function index is read too (a store whose process holds the function)."""
    indexes = ["by_courier", "by_courier_fn"] if functions else ["by_courier"]
    for t_ms in times:
        t, state, matches = t_ms / 1000, replay.state(t_ms), replay.matches(t_ms)
        assert dict(store.items(as_of=t)) == state, t_ms
        assert list(store.keys(reverse=True, as_of=t)) == sorted(state, reverse=True)
        keys = sorted({r.key for r in replay.records})
        assert {k: store.get(k, as_of=t) for k in keys} == {k: state.get(k) for k in keys}
        assert store.get_many(keys, as_of=t) == state
        for name in indexes:
            assert list(store.find_matches(name, prefix="c", as_of=t)) == matches, (name, t_ms)
            courier = COURIERS[t_ms % len(COURIERS)]
            want = [(k, v) for c, k, v in matches if c == courier]
            assert list(store.find(name, courier, as_of=t)) == want, (name, t_ms)
            assert store.find_count(name, courier, as_of=t) == len(want)
    with store.view(as_of=times[-1] / 1000) as then:
        assert list(then.find_matches("by_courier", prefix="c")) == replay.matches(times[-1])


def check_refused_before(store: Any, oldest_ms: int) -> None:
    """A read, of keys or of an index, older than the horizon is refused."""
    for read in (
        lambda: store.get("k00", as_of=(oldest_ms - 1_000) / 1000),
        lambda: list(store.find("by_courier", "c0", as_of=(oldest_ms - 1_000) / 1000)),
    ):
        try:
            read()
        except HistoryUnavailable as exc:
            assert exc.oldest is not None and exc.oldest * 1000 >= oldest_ms - 1
        else:
            raise AssertionError("a time older than the horizon was answered")
