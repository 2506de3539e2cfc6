"""The HTTP API over a store with a ttl, without a broker: expired keys are gone from every
route at once, and /v1/status and /metrics report the time index."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from globalstore.config import StoreConfig
from globalstore.read.protocols import StoreStatus
from globalstore.read.report import ttl_status
from globalstore.server import ServedStore, ServerSettings, create_app
from globalstore.storage import Storage
from tests.unit.prepared import prepared
from tests.unit.server.test_index_routes import TOPIC, TestClient, _Served, by_courier
from tests.unit.shaping.test_ttl import NOW, OLD


class _Expiring(_Served):
    """The test API's store face, with the ttl as the faces apply it."""

    def count(self) -> int:
        return self._unexpired_count(self.storage, self.storage.state.count or 0)

    def status(self) -> StoreStatus:
        return dataclasses.replace(super().status(), ttl=ttl_status(self.storage.state, 2))


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    config = StoreConfig(TOPIC, "f:1", tmp_path / "s", indexes={"by_courier": by_courier}, ttl=60)
    storage = prepared(config)
    records = [
        (f"k{i}".encode(), orjson.dumps({"courier": "c-1"}), None, 0, i, (OLD if i % 2 else NOW))
        for i in range(6)
    ]  # k1, k3, k5 an hour old
    storage.apply(records, {}, True, NOW)
    yield storage
    storage.close()


def test_every_route_leaves_the_expired_keys_out(storage: Storage) -> None:
    served = ServedStore.of(_Expiring(storage))  # type: ignore[arg-type]
    with TestClient(create_app(served, ServerSettings()), base_url="http://localhost") as client:
        assert client.get("/v1/keys/k1").status_code == 404
        assert client.get("/v1/keys/k2").json()["value"] == {"courier": "c-1"}
        listed = client.get("/v1/keys").json()
        assert [item["key"] for item in listed["items"]] == ["k0", "k2", "k4"]
        exported = [
            orjson.loads(line)["key"] for line in client.get("/v1/export").text.splitlines()
        ]
        assert exported == ["k0", "k2", "k4"]
        found = client.get("/v1/indexes/by_courier?value=c-1").json()
        assert [item["key"] for item in found["items"]] == ["k0", "k2", "k4"]
        assert client.get("/v1/count").json()["count"] == 3
        assert client.get("/v1/status").json()["ttl"] == {
            "seconds": 60.0,
            "time_index_entries": 6,
            "time_index_ready": True,
            "purged": 2,
        }
        metrics = client.get("/metrics").text
        assert "globalstore_time_index_entries 6.0" in metrics
        assert "globalstore_ttl_purged_total 2.0" in metrics
