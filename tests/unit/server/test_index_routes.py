"""GET /v1/indexes/{name} without a broker: a store face over real RocksDB, paged by cursor
and by the byte cap, 404 for an unknown index, 503 while one is built, and the metrics."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore.config import StoreConfig
from globalstore.read.protocols import StoreStatus
from globalstore.read.report import index_statuses
from globalstore.server import ServedStore, ServerSettings, create_app
from globalstore.status import State
from globalstore.storage import Storage
from globalstore.stores.store import Store
from tests.unit.prepared import prepared
from tests.unit.store_fakes import OneCopy, batch

with warnings.catch_warnings():  # starlette's notice about the httpx it uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOPIC = "t"


def by_courier(key: str, value: Any) -> str:
    return str(value["courier"])


class _Served(Store):
    """A running store as the API sees it: the real query code over one open Storage."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        super().__init__(OneCopy(storage, TOPIC))  # type: ignore[arg-type]  # reads only

    def status(self) -> StoreStatus:
        state = self.storage.state
        return StoreStatus(
            TOPIC,
            str(self.path),
            State.RUNNING,
            True,
            dict(state.positions),
            {},
            state.count,
            1,
            None,
            True,
            0.0,
            None,
            indexes=index_statuses(state, {}),
        )

    def position(self) -> dict[int, int]:
        return dict(self.storage.state.positions)

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _storage(path: Path, indexes: dict[str, Any], chunk: int = 2_000) -> Storage:
    return prepared(StoreConfig(TOPIC, "f:1", path, indexes=indexes, index_build_chunk=chunk))


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = _storage(tmp_path / "s", {"by_courier": by_courier})
    couriers = ["c-1", "c-2", "c-1", "c-10", "c-1", "c-2", "d-1"]
    values = [orjson.dumps({"courier": c, "pad": "p" * 200}).decode() for c in couriers]
    s.apply(batch(*((f"k{i}", v) for i, v in enumerate(values))), {}, True, 1)
    yield s
    s.close()


def _client(storage: Storage, **settings: Any) -> Iterator[TestClient]:
    served = ServedStore.of(_Served(storage))  # type: ignore[arg-type]
    with TestClient(
        create_app(served, ServerSettings(**settings)), base_url="http://localhost"
    ) as client:
        yield client


def _pages(client: TestClient, url: str) -> list[list[tuple[str, str]]]:
    pages, cursor = [], None
    while True:
        answer = client.get(url if cursor is None else f"{url}&cursor={cursor}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append([(item["index_value"], item["key"]) for item in body["items"]])
        cursor = body["cursor"]
        if cursor is None:
            return pages


def test_pages_of_one_value_and_of_a_range(storage: Storage) -> None:
    for client in _client(storage):
        assert _pages(client, "/v1/indexes/by_courier?value=c-1&limit=2") == [
            [("c-1", "k0"), ("c-1", "k2")],
            [("c-1", "k4")],
        ]
        # By index value, then key; a page may end inside one index value's keys.
        assert _pages(client, "/v1/indexes/by_courier?prefix=c-&start=c-10&limit=2") == [
            [("c-10", "k3"), ("c-2", "k1")],
            [("c-2", "k5")],
        ]
        one = client.get("/v1/indexes/by_courier", params={"value": "d-1"}).json()
        assert one["items"][0]["value"]["courier"] == "d-1" and one["cursor"] is None
        empty = client.get("/v1/indexes/by_courier?value=x").json()
        assert empty == {"items": [], "invalid": [], "cursor": None}


def test_the_byte_cap_ends_a_page_early(storage: Storage) -> None:
    for client in _client(storage, max_page_bytes=600):
        pages = _pages(client, "/v1/indexes/by_courier?end=d")
        assert [len(p) for p in pages] == [2, 2, 2]
        assert [m for p in pages for m in p] == [
            ("c-1", "k0"),
            ("c-1", "k2"),
            ("c-1", "k4"),
            ("c-10", "k3"),
            ("c-2", "k1"),
            ("c-2", "k5"),
        ]


def test_errors_unknown_index_bad_parameters_and_metrics(storage: Storage) -> None:
    for client in _client(storage):
        unknown = client.get("/v1/indexes/by_zone?value=z")
        assert unknown.status_code == 404
        assert unknown.json() == {
            "error": "store for 't' has no index 'by_zone' (it has 'by_courier')"
        }
        both = client.get("/v1/indexes/by_courier?value=c-1&prefix=c")
        assert both.status_code == 400 and "value cannot be combined" in both.json()["error"]
        bad = client.get("/v1/indexes/by_courier?cursor=bm90IGEgcGFpcg")
        assert bad.status_code == 400 and "cursor" in bad.json()["error"]
        metrics = client.get("/metrics").text
        assert 'globalstore_index_entries{index="by_courier"} 7.0' in metrics
        assert 'globalstore_index_ready{index="by_courier"} 1.0' in metrics
        status = client.get("/v1/status").json()
        assert status["indexes"]["by_courier"]["entries"] == 7
        spec = client.get("/openapi.json").json()
        assert "/v1/indexes/{name}" in spec["paths"]


def test_an_index_being_built_answers_503_with_retry_after(tmp_path: Path) -> None:
    storage = _storage(tmp_path / "s", {})
    storage.apply(batch(("a", '{"courier": "c-1"}')), {}, True, 1)
    storage.close()
    storage = _storage(tmp_path / "s", {"by_courier": by_courier})  # added: to be built
    try:
        for client in _client(storage):
            answer = client.get("/v1/indexes/by_courier?value=c-1")
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
            assert "is being built" in answer.json()["error"]
            assert (
                'globalstore_index_build_keys{index="by_courier"} 0.0'
                in client.get("/metrics").text
            )
    finally:
        storage.close()


def test_a_token_protects_the_route(storage: Storage) -> None:
    for client in _client(storage, token="tok"):
        assert client.get("/v1/indexes/by_courier?value=c-1").status_code == 401
        good = client.get(
            "/v1/indexes/by_courier?value=c-1", headers={"Authorization": "Bearer tok"}
        )
        assert [item["key"] for item in good.json()["items"]] == ["k0", "k2", "k4"]
