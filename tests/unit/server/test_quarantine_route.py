"""GET /v1/quarantine and the metric over a real store directory with a quarantine (no
broker): the held records in key order with their origin, reason and value; the gauge
counts them; the OpenAPI document has the route."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from globalstore.read.protocols import StoreStatus
from globalstore.server import ServedStore, ServerSettings, create_app
from globalstore.storage import Storage
from tests.unit.server.test_index_routes import TestClient, _Served, _storage
from tests.unit.server.test_invalid_routes import _metric
from tests.unit.storage.test_quarantine import quarantining
from tests.unit.store_fakes import batch


class _Quarantining(_Served):
    def status(self) -> StoreStatus:
        return dataclasses.replace(super().status(), quarantined=self.storage.state.quarantined)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = quarantining(_storage(tmp_path / "s", {}))
    s.apply(batch(("a", '{"x":1}'), ("b", "not json {"), ("c", "{"), ("a", "[")), {}, True, 1)
    yield s
    s.close()


def test_the_route_lists_the_held_records_and_the_metric_counts_them(storage: Storage) -> None:
    served = ServedStore.of(_Quarantining(storage))  # type: ignore[arg-type]
    with TestClient(create_app(served, ServerSettings()), base_url="http://localhost") as client:
        body = client.get("/v1/quarantine").json()
        assert [(q["key"], q["offset"], q["value"]) for q in body["quarantined"]] == [
            ("a", 3, "["),
            ("b", 1, "not json {"),
            ("c", 2, "{"),
        ]
        assert all(q["reason"].startswith("not valid JSON") for q in body["quarantined"])
        assert client.get("/v1/keys/a").json()["value"] == {"x": 1}
        assert _metric(client, "globalstore_quarantined") == 3
        assert "/v1/quarantine" in client.get("/openapi.json").json()["paths"]


def test_the_route_pages_by_limit_cursor_and_bytes_and_cuts_each_value(tmp_path: Path) -> None:
    storage = quarantining(_storage(tmp_path / "s", {}))
    big = "\xff" * 50_000  # not JSON: held whole, 100,000 bytes of UTF-8
    held = [(f"k{i:03d}", big if i % 7 == 0 else "not json") for i in range(40)]
    storage.apply(batch(*held), {}, True, 1)
    served = ServedStore.of(_Quarantining(storage))  # type: ignore[arg-type]
    app = create_app(served, ServerSettings(max_page_bytes=16_384))
    keys: list[str] = []
    with TestClient(app, base_url="http://localhost") as client:
        first = client.get("/v1/quarantine", params={"limit": 3})
        assert [q["key"] for q in first.json()["quarantined"]] == ["k000", "k001", "k002"]
        cut = first.json()["quarantined"][0]
        assert cut["value_bytes"] == len(big.encode()) and cut["value_cut"]
        assert len(first.content) < 8_000  # three records, one of 100,000 bytes held
        cursor = None
        while True:
            page = client.get("/v1/quarantine", params={"cursor": cursor} if cursor else {})
            assert len(page.content) <= 16_384 + 4_096  # the byte cap (one record past it)
            keys += [q["key"] for q in page.json()["quarantined"]]
            cursor = page.json()["cursor"]
            if cursor is None:
                break
    storage.close()
    assert keys == [key for key, _ in held]  # every one, once, in key order
