"""A declared transform (Shape) against a real broker and real RocksDB: a store restored by the
C loop (which shapes in C), one restored by the Python loop, and one given the equivalent
transform written as a Python function hold the same bytes for every key, after the restore
(keys written again and deleted in it) and while following: values that are not JSON, not
objects, that lack the fields, fail the condition, or hold what the C code leaves to Python
(escapes, exponents, white space, repeated names) included. Failures count alike, and with
invalid_values="quarantine" the same records are quarantined."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import orjson

from globalstore import GlobalStore, Shape
from globalstore.codec import format_headers
from globalstore.storage import Storage
from globalstore.storage.meta import QUARANTINE_PREFIX
from tests.integration.store_support import producer

SHAPE = Shape(fields=["customer", "status", "amount", "items"], where={"status": ["new", "paid"]})
KEPT = ("customer", "status", "amount", "items")

# Raw documents: what the C code leaves to Python, or what the function refuses.
ODD = [
    b"not json {",
    b'["status", "new"]',
    b'"new"',
    b"7",
    b'{"status": "new", "customer": "spaced", "amount": 1.5}',  # white space between members
    b'{"status":"new","items":[1, 2]}',  # white space inside a kept value
    b'{"status":"new","amount":1e5}',  # an exponent
    b'{"status":"new","amount":1.50}',  # not as repr writes it
    b'{"status":"new","amount":-0}',
    b'{"status":"new","amount":-0.0,"customer":"z"}',
    b'{"status":"ne\\u0077","customer":"escaped condition"}',
    b'{"status":"new","customer":"caf\\u00e9"}',  # an escape in a kept value
    b'{"sta\\u0074us":"new","customer":"escaped name"}',
    b'{"status":"new","customer":"first","customer":"last"}',  # the last one, as orjson
    b'{"status":"new","items":{"a":1,"a":2}}',  # a repeated name inside a kept value
    b'{"status":"new","items":{"b":[true,false,null],"a":"\xc3\xa9"}}',
    b'{"status":"shipped","customer":"filtered out"}',
    b'{"status":null,"customer":"null status"}',
    b'{"customer":"no status"}',
    b'{"status":["new"],"customer":"a list status"}',
    b'{"status":"paid"}',  # none of the fields but the condition's
    b"{}",
]


def equivalent(key: str, value: Any) -> Any:
    """SHAPE, written as a transform function."""
    if not isinstance(value, dict):
        raise TypeError("not a JSON object")
    if value.get("status") not in ("new", "paid") or type(value.get("status")) is not str:
        return None
    return {name: value[name] for name in KEPT if name in value}


def _value(rng: random.Random) -> bytes | None:
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.3:
        return rng.choice(ODD)
    order: dict[str, Any] = {"id": rng.randrange(10**6), "note": "side door"}
    if rng.random() < 0.9:
        order["status"] = rng.choice(["new", "paid", "shipped", "delivered"])
    if rng.random() < 0.9:
        order["customer"] = f"c-{rng.randrange(50)}"
    if rng.random() < 0.8:
        order["amount"] = rng.choice([round(rng.uniform(0, 1000), 2), rng.randrange(1000), 0.5])
    if rng.random() < 0.5:
        order["items"] = [rng.randrange(9) for _ in range(rng.randrange(4))]
    return orjson.dumps(order)


def _produce(bootstrap: str, topic: str, rng: random.Random, n: int, keys: int) -> dict[int, int]:
    p, written = producer(bootstrap), {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        written[msg.partition()] = max(written.get(msg.partition(), 0), msg.offset() + 1)

    for _ in range(n):
        p.produce(topic, key=f"o{rng.randrange(keys):03d}".encode(), value=_value(rng),
                  headers=format_headers(), on_delivery=delivered)  # fmt: skip
        p.poll(0)
    assert p.flush(30) == 0
    return written


def _stored(path: Path) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """Every data entry a store left on disk, and its quarantine's entries."""
    storage = Storage(path)
    try:
        data = list(storage.scan(None, None, False))
        held = [
            kv
            for kv in storage.meta_items(QUARANTINE_PREFIX)
            if kv[0].startswith(QUARANTINE_PREFIX)
        ]
        return data, held
    finally:
        storage.close()


def test_a_declared_transform_stores_the_bytes_of_its_function_on_both_loops(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    rng = random.Random(4711)
    topic = make_topic(partitions=3)
    _produce(kafka_bootstrap, topic, rng, 3_000, 300)
    bulk = {"bulk_restore_threshold": 100, "restore_batch_size": 200}
    stores: dict[str, dict[str, Any]] = {
        "function": {"transform": equivalent, **bulk},
        "declared": {"transform": SHAPE, **bulk},  # the C loop shapes in C
        "declared, Python loop": {"transform": SHAPE, "native_restore": False, **bulk},
        "function, quarantine": {"transform": equivalent, "invalid_values": "quarantine", **bulk},
        "declared, quarantine": {"transform": SHAPE, "invalid_values": "quarantine", **bulk},
    }
    failures = {}
    with contextlib.ExitStack() as open_stores:
        running = {
            name: open_stores.enter_context(
                GlobalStore(topic, kafka_bootstrap, tmp_path / name, **s)
            )
            for name, s in stores.items()
        }
        for _ in range(3):  # following
            written = _produce(kafka_bootstrap, topic, rng, 100, 300)
            assert all(store.wait_for(written, 60) for store in running.values())
        failures = {name: store.status().transform_failures for name, store in running.items()}
    stored = {name: _stored(tmp_path / name) for name in stores}
    data, _ = stored["function"]
    assert len(data) > 50 and failures["function"] > 0
    for name in ("declared", "declared, Python loop"):
        assert stored[name][0] == data, name
        assert failures[name] == failures["function"], name
    quarantined_data, quarantined = stored["function, quarantine"]
    assert quarantined, "a value that is not JSON is quarantined"
    assert stored["declared, quarantine"] == (quarantined_data, quarantined)
    assert failures["declared, quarantine"] == failures["function, quarantine"]
