"""Helpers of the change feed tests: a known stream produced with the offset of each record,
and the check that a feed delivered exactly that stream."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.read.changes import Change
from tests.integration.store_support import Record, producer

Sent = dict[tuple[int, int], tuple[str, Any]]  # (partition, offset) -> (key, value or None)


def stream(n: int, keys: int = 50) -> list[Record]:
    """n records over `keys` keys, every seventh a delete."""
    return [(f"k{i % keys}", None if i % 7 == 3 else {"i": i}) for i in range(n)]


def produce_known(bootstrap: str, topic: str, records: Iterable[Record]) -> Sent:
    """Produce `records` and return where each landed."""
    p, headers = producer(bootstrap), format_headers()
    sent: Sent = {}
    failed: list[Any] = []

    def delivered(key: str, value: Any) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(err)
            else:
                sent[(msg.partition(), msg.offset())] = (key, value)

        return on_delivery

    for key, value in records:
        p.produce(topic, key=encode_key(key), value=encode_value(value), headers=headers,
                  on_delivery=delivered(key, value))  # fmt: skip
        p.poll(0)
    assert p.flush(30) == 0
    assert not failed, failed
    return sent


def ends(sent: Sent) -> dict[int, int]:
    """{partition: the offset after the last record sent there}."""
    out: dict[int, int] = {}
    for p, o in sent:
        out[p] = max(out.get(p, 0), o + 1)
    return out


def check_exactly(changes: Iterable[Change], sent: Sent, starts: Mapping[int, int]) -> None:
    """Every record sent arrived once, as sent, in offset order per partition, and nothing
    else did (records sent before `starts` excepted)."""
    last: dict[int, int] = {}
    got: Sent = {}
    for change in changes:
        where = (change.partition, change.offset)
        assert where not in got, f"{where} arrived twice"
        assert change.offset > last.get(change.partition, -1), f"{where} out of order"
        last[change.partition] = change.offset
        got[where] = (change.key, change.value)
    wanted = {where: kv for where, kv in sent.items() if where[1] >= starts.get(where[0], 0)}
    missing = sorted(set(wanted) - set(got))[:5]
    extra = sorted(set(got) - set(wanted))[:5]
    assert not missing and not extra, f"missing {missing}, extra {extra}"
    assert got == wanted
