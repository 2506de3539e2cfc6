"""The HTTP API as of a time, without a broker: ?as_of= in RFC 3339 or epoch seconds on a
key, a page and an export; a time older than the store answers is a 400 naming the oldest
one; a malformed or zone-less time is a 400 naming the parameter; an index page as of a
time."""

from __future__ import annotations

from pathlib import Path

import orjson

from globalstore.server import ServedStore, ServerSettings, create_app
from tests.unit.server.test_index_routes import TestClient, _Served, _storage


def test_key_page_and_export_answer_as_of_a_time(tmp_path: Path) -> None:
    storage = _storage(tmp_path / "s", {})
    storage.history.define(10**13, 5_000)  # complete from 5 s after the epoch
    storage.apply(
        [
            (b"a", b'{"v":1}', None, 0, 0, 6_000),
            (b"b", b'{"v":1}', None, 0, 1, 6_000),
            (b"a", b'{"v":2}', None, 0, 2, 8_000),
            (b"b", None, None, 0, 3, 8_000),
        ],
        {},
        True,
        1,
    )
    served = ServedStore.of(_Served(storage))  # type: ignore[arg-type]
    with TestClient(create_app(served, ServerSettings()), base_url="http://localhost") as client:
        assert client.get("/v1/keys/a?as_of=7").json()["value"] == {"v": 1}
        assert client.get("/v1/keys/a?as_of=1970-01-01T00:00:07Z").json()["value"] == {"v": 1}
        assert client.get("/v1/keys/a?as_of=1970-01-01T01:00:09%2B01:00").json()["value"] == {
            "v": 2
        }
        assert client.get("/v1/keys/b?as_of=9").status_code == 404
        page = client.get("/v1/keys?as_of=7").json()
        assert [(i["key"], i["value"]) for i in page["items"]] == [("a", {"v": 1}), ("b", {"v": 1})]
        lines = client.get("/v1/export?as_of=9").text.splitlines()
        assert [orjson.loads(line)["key"] for line in lines] == ["a"]
        too_old = client.get("/v1/keys/a?as_of=4")
        assert too_old.status_code == 400 and too_old.json()["oldest"] == 5.0
        assert "oldest time it can answer" in too_old.json()["error"]
        for bad in ("yesterday", "2026-11-29T09:00:00", "nan", "1E100", "-1e20"):
            for route in ("/v1/keys/a", "/v1/keys", "/v1/export"):
                answer = client.get(f"{route}?as_of={bad}")
                assert answer.status_code == 400 and "as_of" in answer.json()["error"]
        assert client.get("/v1/status").status_code == 200
    storage.close()


def test_an_index_page_answers_as_of_a_time(tmp_path: Path) -> None:
    storage = _storage(tmp_path / "s", {"by_courier": "courier"})
    storage.history.define(10**13, 5_000)
    storage.apply([(b"a", b'{"courier":"c-1"}', None, 0, 0, 6_000)], {}, True, 1)
    storage.apply([(b"a", b'{"courier":"c-2"}', None, 0, 1, 8_000)], {}, True, 1)
    served = ServedStore.of(_Served(storage))  # type: ignore[arg-type]
    with TestClient(create_app(served, ServerSettings()), base_url="http://localhost") as client:
        then = client.get("/v1/indexes/by_courier?value=c-1&as_of=7").json()
        assert [(i["key"], i["value"]) for i in then["items"]] == [("a", {"courier": "c-1"})]
        assert client.get("/v1/indexes/by_courier?value=c-1").json()["items"] == []
        assert client.get("/v1/indexes/by_courier?value=c-1&as_of=4").status_code == 400
    storage.close()
