"""The HTTP API over a real store directory holding values that do not decode (no broker):
every page answers 200 and the pages reach the end, each bad key listed once under `invalid`;
an export reports them in line and goes on; the metric counts each report; get of a bad key
answers 500 naming its record; the OpenAPI document describes `invalid`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from globalstore.codec import HEADER, LAYOUT_VERSION
from globalstore.storage import Storage
from tests.unit.read.test_arrow import _raw_values
from tests.unit.server.test_index_routes import TestClient, _client, _storage, by_courier
from tests.unit.store_fakes import batch

_BAD_KEYS = {"k03": 3, "k04": 4, "k11": 11}  # key: the offset of its record


def _metric(client: TestClient, name: str) -> float:
    text = client.get("/metrics").text
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    path = tmp_path / "s"
    s = _storage(path, {"by_courier": by_courier})
    values = [orjson.dumps({"courier": f"c-{i % 2}"}).decode() for i in range(12)]
    s.apply(batch(*((f"k{i:02d}", v) for i, v in enumerate(values))), {}, True, 1)
    s.close()
    # Turned bad after they were indexed: what the index finds must be reported too.
    not_json = b"not json {"
    _raw_values(
        path,
        [
            (k.encode(), HEADER.pack(LAYOUT_VERSION, 1, 0, 0, o) + not_json)
            for k, o in _BAD_KEYS.items()
        ],
    )
    s = _storage(path, {"by_courier": by_courier})
    yield s
    s.close()


def _walk(client: TestClient, url: str) -> tuple[list[str], list[dict[str, object]], int]:
    """Every page of `url`: the keys of the items, the invalid entries, the pages."""
    keys: list[str] = []
    invalid: list[dict[str, object]] = []
    pages, cursor = 0, None
    while True:
        answer = client.get(url if cursor is None else f"{url}&cursor={cursor}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        keys += [item["key"] for item in body["items"]]
        invalid += body["invalid"]
        pages, cursor = pages + 1, body["cursor"]
        if cursor is None:
            return keys, invalid, pages


def test_pages_answer_200_list_each_bad_key_once_and_reach_the_end(storage: Storage) -> None:
    good = [f"k{i:02d}" for i in range(12) if f"k{i:02d}" not in _BAD_KEYS]
    for client in _client(storage):
        for limit in (1, 2, 3, 100):
            keys, invalid, pages = _walk(client, f"/v1/keys?limit={limit}")
            assert keys == good, limit
            assert [(e["key"], e["partition"], e["offset"]) for e in invalid] == [
                (k, 0, o) for k, o in _BAD_KEYS.items()
            ], limit
            assert all(str(e["reason"]).startswith("not valid JSON") for e in invalid)
            assert pages == -(-12 // limit), limit  # bad keys take their place in a page
        # A page of bad keys only still moves on.
        only_bad = client.get("/v1/keys?start=k03&end=k05").json()
        assert only_bad["items"] == [] and len(only_bad["invalid"]) == 2
        assert only_bad["cursor"] is None
        # Reported as many times as pages listed them: 4 walks of 3 keys, then 2.
        assert _metric(client, "globalstore_decode_errors_total") == 14


def test_index_pages_list_bad_keys_with_their_index_value(storage: Storage) -> None:
    for client in _client(storage):
        keys, invalid, _ = _walk(client, "/v1/indexes/by_courier?prefix=c-&limit=2")
        assert keys == ["k00", "k02", "k06", "k08", "k10", "k01", "k05", "k07", "k09"]
        assert [(e["index_value"], e["key"]) for e in invalid] == [
            ("c-0", "k04"),
            ("c-1", "k03"),
            ("c-1", "k11"),
        ]


def test_an_export_skips_bad_values_reports_each_and_counts_it(storage: Storage) -> None:
    for client in _client(storage, export_chunk=2):
        lines = [orjson.loads(line) for line in client.get("/v1/export").text.splitlines()]
        assert [line["key"] for line in lines if "value" in line] == [
            f"k{i:02d}" for i in range(12) if f"k{i:02d}" not in _BAD_KEYS
        ]
        errors = [line for line in lines if "error" in line]
        assert [(e["key"], e["offset"]) for e in errors] == list(_BAD_KEYS.items())
        assert errors[-1]["error"].startswith("InvalidValue: invalid value for key 'k11'")
        assert lines[-1] == errors[-1]  # the last value is bad: still reported and counted
        assert _metric(client, "globalstore_decode_errors_total") == 3


def test_get_of_a_bad_key_answers_500_naming_its_record(storage: Storage) -> None:
    for client in _client(storage):
        answer = client.get("/v1/keys/k04")
        assert answer.status_code == 500
        assert "InvalidValue" in answer.json()["error"] and "offset 4" in answer.json()["error"]
        assert _metric(client, "globalstore_decode_errors_total") == 1


def test_the_openapi_document_describes_invalid(storage: Storage) -> None:
    for client in _client(storage):
        paths = client.get("/openapi.json").json()["paths"]
        for path in ("/v1/keys", "/v1/indexes/{name}"):
            page = paths[path]["get"]["responses"]["200"]["content"]["application/json"]
            invalid = page["schema"]["properties"]["invalid"]["items"]
            assert {"key", "partition", "offset", "reason"} <= set(invalid["required"]), path
        assert "index_value" in page["schema"]["properties"]["invalid"]["items"]["required"]
